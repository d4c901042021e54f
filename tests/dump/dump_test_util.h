// Helpers of the rollout-dump tests (unit and MPI): deterministic groups of
// varied shape (1-4 responses, empty responses, non-ASCII and cut UTF-8
// text, uids above INT64_MAX), and a field-by-field group comparison that
// names the field that differs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dapo/dump/rollout_dump.h"
#include "dapo/rl/group_data.h"

namespace dapo::test {

// Group number `seed`: its shape and values follow from the seed alone, so
// every rank can build every rank's groups. `trained`: advantages and old
// log-probs filled (else empty, as for a group that was not trained); the
// sampler's log-probs in all but every 7th group.
inline rl::GroupData make_dump_group(int64_t seed, bool trained) {
  rl::GroupData g;
  g.uid = int64_t(0x9e3779b97f4a7c15ull * uint64_t(seed + 1));  // often above INT64_MAX as uint64
  g.round = seed % 3;
  g.position = seed;
  g.data_source = seed % 2 ? "math" : "arith_日本";
  g.ground_truth = std::to_string(seed * 7);
  g.prompt_text = "Prompt " + std::to_string(seed) + ": combien font 3×" + std::to_string(seed) + " ? λ→∞ 🙂";
  for (int64_t t = 0; t < 2 + seed % 5; ++t) g.prompt_ids.push_back(int32_t(100 + seed * 10 + t));
  const int64_t n = 1 + seed % 4;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t len = (seed + k) % 4 == 3 ? 0 : 1 + (seed * 3 + k) % 5;  // some empty responses
    for (int64_t t = 0; t < len; ++t) {
      g.response_ids.push_back(int32_t(1000 + seed * 100 + k * 10 + t));
      if (trained) g.old_logprobs.push_back(-0.125f * float(t + 1) - 0.01f * float(seed));
      if (seed % 7 != 6) g.sampling_logprobs.push_back(-0.25f * float(t + 1) - 0.03f * float(seed + k));
    }
    g.response_offsets.push_back(int64_t(g.response_ids.size()));
    g.finish_reason.push_back(uint8_t(len == 5 ? 1 : 0));
    const bool correct = (seed + k) % 2 == 0;
    g.score.push_back(correct ? 1.0 : -1.0);
    g.acc.push_back(correct ? 1.0 : 0.0);
    g.reward.push_back((correct ? 1.0 : -1.0) - (len == 5 ? 0.1 * double(seed % 3) : 0.0));
    g.in_loss.push_back(uint8_t(len == 5 && seed % 2 ? 0 : 1));
    if (trained) g.advantage.push_back((correct ? 0.5 : -0.5) + 0.001 * double(seed));
    // A response cut inside a multi-byte character, as decoding can leave it.
    g.response_text.push_back(k == 1 ? std::string("réponse \xe6\xbc") : "answer é " + std::to_string(seed + k));
    g.pred.push_back(correct ? g.ground_truth : std::to_string(k));
  }
  return g;
}

inline rl::GroupOutcome outcome_of(const rl::GroupData& g) {
  return rl::classify_group(g.acc, g.acc);
}

inline void expect_group_eq(const rl::GroupData& got, const rl::GroupData& want, const std::string& where) {
  SCOPED_TRACE(where + ", uid " + std::to_string(want.uid));
  EXPECT_EQ(got.uid, want.uid);
  EXPECT_EQ(got.round, want.round);
  EXPECT_EQ(got.position, want.position);
  EXPECT_EQ(got.data_source, want.data_source);
  EXPECT_EQ(got.ground_truth, want.ground_truth);
  EXPECT_EQ(got.prompt_text, want.prompt_text);
  EXPECT_EQ(got.prompt_ids, want.prompt_ids);
  EXPECT_EQ(got.response_offsets, want.response_offsets);
  EXPECT_EQ(got.response_ids, want.response_ids);
  EXPECT_EQ(got.old_logprobs, want.old_logprobs);
  EXPECT_EQ(got.sampling_logprobs, want.sampling_logprobs);
  EXPECT_EQ(got.finish_reason, want.finish_reason);
  EXPECT_EQ(got.score, want.score);
  EXPECT_EQ(got.acc, want.acc);
  EXPECT_EQ(got.reward, want.reward);
  EXPECT_EQ(got.in_loss, want.in_loss);
  EXPECT_EQ(got.advantage, want.advantage);
  EXPECT_EQ(got.response_text, want.response_text);
  EXPECT_EQ(got.pred, want.pred);
  EXPECT_TRUE(got == want);
}

}  // namespace dapo::test
