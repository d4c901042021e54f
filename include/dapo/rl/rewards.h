// From verifier outputs to the rewards of the update (docs/DESIGN.md section 2,
// phase 3): each response's score (+1 correct / -1 wrong) plus DAPO's soft
// overlong punishment (reward/overlong.h), and whether the response stays in
// the loss (overlong filtering masks out truncated responses). Also the
// value dynamic sampling compares within a group (algorithm.filter_metric),
// as verl's DAPO recipe names them:
//   acc        the verifier's correctness (1 / 0),
//   score      the verifier's score before shaping,
//   seq_reward the shaped reward (score + overlong penalty).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/reward/overlong.h"

namespace dapo::rl {

struct ResponseReward {
  double score = 0;    // verifier score
  double acc = 0;      // 1 correct, 0 wrong
  double penalty = 0;  // soft overlong punishment, <= 0
  double reward = 0;   // score + penalty: what the advantages use
  bool in_loss = true; // false: truncated and overlong filtering is on
};

// scores, acc, lengths (response tokens), truncated (1: stopped at
// max_response_length without EOS): (N) each. Returns (N) rewards.
// Mismatched lengths are a bug (DAPO_CHECK).
std::vector<ResponseReward> shape_rewards(std::span<const double> scores, std::span<const double> acc,
                                          std::span<const int64_t> lengths, std::span<const uint8_t> truncated,
                                          const reward::OverlongShaping& shaping);

double filter_metric_value(FilterMetric metric, const ResponseReward& r);

}  // namespace dapo::rl
