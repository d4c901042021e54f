// reward.verifier's dispatch (verify.h).
#include "dapo/reward/verify.h"

#include "dapo/reward/math_dapo.h"

namespace dapo::reward {

Verdict verify(RewardVerifier verifier, std::string_view response, std::string_view ground_truth) {
  return verifier == RewardVerifier::math_dapo ? verify_math_dapo(response, ground_truth)
                                               : verify_math(response, ground_truth);
}

RewardVerifier other_verifier(RewardVerifier run) {
  return run == RewardVerifier::math_dapo ? RewardVerifier::symbolic : RewardVerifier::math_dapo;
}

}  // namespace dapo::reward
