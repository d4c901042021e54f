// Overlong reward shaping of DAPO (arXiv:2503.14476, section 3.4), as
// docs/DESIGN.md states it:
//  - soft overlong punishment: with L_max = max_response_length and
//    L_cache = overlong_buffer_len, expected = L_max - L_cache and
//        penalty = min(-(len - expected) / L_cache * factor, 0),
//    i.e. 0 up to L_max - L_cache tokens, then falling linearly to -factor
//    at L_max; no penalty at all when L_cache is 0;
//  - overlong filtering: a truncated response (it hit L_max without ending)
//    is masked out of the loss, a separate switch from the penalty.
// Lengths are response tokens.
#pragma once

#include <cstdint>

#include "dapo/core/config.h"

namespace dapo::reward {

// Requires 0 <= overlong_buffer_len <= max_response_length and
// response_length >= 0 (DAPO_CHECK: the configuration loader rejects bad values).
double overlong_penalty(int64_t response_length, int64_t max_response_length, int64_t overlong_buffer_len,
                        double penalty_factor);

struct OverlongShaping {
  int64_t max_response_length = 0;
  int64_t buffer_len = 0;   // 0: no soft punishment
  double penalty_factor = 1.0;
  bool filter = false;      // mask truncated responses out of the loss
};

OverlongShaping overlong_shaping(const Config& config);  // rollout.max_response_length + [algorithm] keys

struct ShapedReward {
  double reward = 0;       // score + penalty
  double penalty = 0;      // <= 0
  bool in_loss = true;     // false: masked out by overlong filtering
};

// `truncated`: the response stopped at max_response_length without EOS.
ShapedReward shape_reward(double score, int64_t response_length, bool truncated, const OverlongShaping& shaping);

}  // namespace dapo::reward
