// GRPO outcome advantages (docs/DESIGN.md section 2, phase 6): one scalar per
// response, computed within its group of n responses to the same prompt,
//   norm_adv_by_std:  A = (r - mean_group) / (std_group + 1e-6)
//   otherwise:        A =  r - mean_group                 (Dr. GRPO)
// with std the UNBIASED sample standard deviation (torch.std, divisor
// n - 1), as verl's compute_grpo_outcome_advantage. Sums are in double.
//
// One deliberate difference from verl: a group of a single response gets
// A = 0 (verl uses mean 0 and std 1 there, i.e. A = r / (1 + 1e-6)). With
// one response there is no baseline to compare against; dynamic sampling
// needs n >= 2 anyway (the configuration enforces it).
//
// The advantage of a response applies to every one of its tokens
// (broadcast): see fill_response_values in response_tokens.h.
#pragma once

#include <cstdint>
#include <span>

namespace dapo::rl {

inline constexpr double kGrpoStdEpsilon = 1e-6;

// rewards: (N) one per response, groups contiguous: group g is
//   [group_offsets[g], group_offsets[g+1]); group_offsets (G+1) starts at 0,
//   ends at N, non-decreasing (an empty group is allowed and writes nothing).
// advantages: (N), overwritten (may alias rewards).
// Non-finite rewards are a bug upstream (DAPO_CHECK).
void grpo_advantages(std::span<const double> rewards, std::span<const int64_t> group_offsets, bool norm_by_std,
                     std::span<double> advantages);

// The same for one group.
void grpo_group_advantages(std::span<const double> rewards, bool norm_by_std, std::span<double> advantages);

}  // namespace dapo::rl
