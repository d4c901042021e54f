// Soft overlong punishment and overlong filtering (overlong.h).
#include "dapo/reward/overlong.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::reward {

double overlong_penalty(int64_t response_length, int64_t max_response_length, int64_t overlong_buffer_len,
                        double penalty_factor) {
  DAPO_CHECK(overlong_buffer_len >= 0 && overlong_buffer_len <= max_response_length, "overlong_buffer_len ",
             overlong_buffer_len, " max_response_length ", max_response_length);
  DAPO_CHECK(response_length >= 0, response_length);
  if (overlong_buffer_len == 0) return 0.0;
  const int64_t expected = max_response_length - overlong_buffer_len;
  const double over = double(response_length - expected);
  return std::min(-over / double(overlong_buffer_len) * penalty_factor, 0.0);
}

OverlongShaping overlong_shaping(const Config& config) {
  OverlongShaping s;
  s.max_response_length = config.rollout.max_response_length;
  s.buffer_len = config.algorithm.overlong_buffer_len;
  s.penalty_factor = config.algorithm.overlong_penalty_factor;
  s.filter = config.algorithm.overlong_filter;
  return s;
}

ShapedReward shape_reward(double score, int64_t response_length, bool truncated, const OverlongShaping& shaping) {
  ShapedReward r;
  r.penalty = overlong_penalty(response_length, shaping.max_response_length, shaping.buffer_len,
                               shaping.penalty_factor);
  r.reward = score + r.penalty;
  r.in_loss = !(shaping.filter && truncated);
  return r;
}

}  // namespace dapo::reward
