// Shaped rewards and the filter metric (rewards.h).
#include "dapo/rl/rewards.h"

#include "dapo/core/error.h"

namespace dapo::rl {

std::vector<ResponseReward> shape_rewards(std::span<const double> scores, std::span<const double> acc,
                                          std::span<const int64_t> lengths, std::span<const uint8_t> truncated,
                                          const reward::OverlongShaping& shaping) {
  const size_t n = scores.size();
  DAPO_CHECK(acc.size() == n && lengths.size() == n && truncated.size() == n, "shape_rewards: ", n, " scores, ",
             acc.size(), " acc, ", lengths.size(), " lengths, ", truncated.size(), " truncated flags");
  std::vector<ResponseReward> out(n);
  for (size_t i = 0; i < n; ++i) {
    const reward::ShapedReward s = reward::shape_reward(scores[i], lengths[i], truncated[i] != 0, shaping);
    out[i] = {scores[i], acc[i], s.penalty, s.reward, s.in_loss};
  }
  return out;
}

double filter_metric_value(FilterMetric metric, const ResponseReward& r) {
  switch (metric) {
    case FilterMetric::acc: return r.acc;
    case FilterMetric::score: return r.score;
    case FilterMetric::seq_reward: return r.reward;
  }
  DAPO_FAIL("bad filter metric ", int(metric));
}

}  // namespace dapo::rl
