// GRPO group-normalised advantages (advantages.h).
#include "dapo/rl/advantages.h"

#include <cmath>

#include "dapo/core/error.h"

namespace dapo::rl {

void grpo_group_advantages(std::span<const double> rewards, bool norm_by_std, std::span<double> advantages) {
  DAPO_CHECK(rewards.size() == advantages.size(), "grpo: ", rewards.size(), " rewards, ", advantages.size(),
             " advantages");
  const size_t n = rewards.size();
  for (double r : rewards) DAPO_CHECK(std::isfinite(r), "grpo: non-finite reward ", r);
  if (n == 1) {
    advantages[0] = 0.0;
    return;
  }
  if (n == 0) return;
  double sum = 0;
  for (double r : rewards) sum += r;
  const double mean = sum / double(n);
  double ss = 0;
  for (double r : rewards) ss += (r - mean) * (r - mean);
  const double denom = norm_by_std ? std::sqrt(ss / double(n - 1)) + kGrpoStdEpsilon : 1.0;
  for (size_t i = 0; i < n; ++i) advantages[i] = (rewards[i] - mean) / denom;
}

void grpo_advantages(std::span<const double> rewards, std::span<const int64_t> group_offsets, bool norm_by_std,
                     std::span<double> advantages) {
  DAPO_CHECK(rewards.size() == advantages.size(), "grpo: ", rewards.size(), " rewards, ", advantages.size(),
             " advantages");
  DAPO_CHECK(!group_offsets.empty() && group_offsets.front() == 0 &&
                 group_offsets.back() == int64_t(rewards.size()),
             "grpo: group offsets must run from 0 to ", rewards.size());
  for (size_t g = 0; g + 1 < group_offsets.size(); ++g) {
    const int64_t b = group_offsets[g], e = group_offsets[g + 1];
    DAPO_CHECK(b <= e, "grpo: group offsets decrease at group ", g);
    grpo_group_advantages(rewards.subspan(size_t(b), size_t(e - b)), norm_by_std,
                          advantages.subspan(size_t(b), size_t(e - b)));
  }
}

}  // namespace dapo::rl
