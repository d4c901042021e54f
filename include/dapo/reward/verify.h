// The reward a run gives a response: reward.verifier picks the paper's
// math_dapo (math_dapo.h) or dapo's symbolic verifier (verifier.h). Both
// score +1 / -1 with acc and the extracted answer; validation reports the
// other one beside the run's, so that accuracies compare with the paper's.
#pragma once

#include <string_view>

#include "dapo/core/config.h"
#include "dapo/reward/verifier.h"

namespace dapo::reward {

Verdict verify(RewardVerifier verifier, std::string_view response, std::string_view ground_truth);

// The verifier validation reports beside `run`'s.
RewardVerifier other_verifier(RewardVerifier run);

}  // namespace dapo::reward
