// The host plan of CUDA's small-batch products (ops/plan/gemv_plan.h),
// without a GPU: one thread per 16-byte piece of a weight row in whole
// warps up to the cap, one CTA per kGemvTileRows rows of each segment, and
// the kernel taken where it measured faster. The thread count depends on K alone,
// so a row's summation order does not depend on M.
#include "dapo/ops/plan/gemv_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace dapo::ops::plan {
namespace {

TEST(GemvPlan, ThreadsCoverAPieceEachInWholeWarpsUpToTheCap) {
  struct Case {
    int64_t K, threads;
  };
  // 8 elements a piece: 1 piece -> a warp; 1536 -> 192; 8960 (1,120 pieces) -> the cap.
  for (const Case c : {Case{8, 32}, Case{256, 32}, Case{264, 64}, Case{896, 128}, Case{1536, 192}, Case{2048, 256},
                       Case{8960, 256}, Case{18944, 256}}) {
    const int64_t rows[] = {16};
    const GemvPlan p = gemv_plan(c.K, rows);
    EXPECT_EQ(p.threads, c.threads) << "K " << c.K;
    EXPECT_EQ(p.threads % 32, 0);
    EXPECT_LE(p.threads, kGemvMaxThreads);
  }
}

TEST(GemvPlan, OneCtaPerTileOfEachSegmentAndNoneForAnEmptyOne) {
  const int64_t qkv[] = {1536, 256, 256};
  EXPECT_EQ(gemv_plan(1536, qkv).ctas, (1536 + 256 + 256) / kGemvTileRows);
  // Segments that end inside a tile each round up on their own.
  const int64_t odd[] = {5, 3, 130, 1, 0};
  EXPECT_EQ(gemv_plan(40, odd).ctas, 2 + 1 + 33 + 1 + 0);
}

TEST(GemvPlan, TakesOneRowAlwaysAndMoreRowsOnSmallerWeights) {
  const int64_t down[] = {1536}, lm_head[] = {151936}, qkv[] = {1536, 256, 256}, k[] = {256};
  EXPECT_FALSE(gemv_preferred(0, 8960, down));
  EXPECT_TRUE(gemv_preferred(1, 1536, lm_head));  // 467 MB
  EXPECT_TRUE(gemv_preferred(2, 8960, down));     // 27.5 MB
  EXPECT_FALSE(gemv_preferred(2, 1536, lm_head));
  EXPECT_TRUE(gemv_preferred(4, 1536, qkv));      // 6.3 MB
  EXPECT_FALSE(gemv_preferred(4, 8960, down));
  EXPECT_FALSE(gemv_preferred(5, 1536, qkv));
  EXPECT_TRUE(gemv_preferred(8, 1536, k));        // 0.8 MB
  EXPECT_FALSE(gemv_preferred(kGemvMaxRows + 1, 1536, k));
  const int64_t none[] = {0, 0};
  EXPECT_FALSE(gemv_preferred(1, 8960, none));
  EXPECT_FALSE(gemv_preferred(1, 4, down));  // less than one piece
}

TEST(GemvPlan, TakesSwigluAtOneRowAndAtTwoUpTo200MB) {
  for (const int64_t M : {1, 2}) EXPECT_TRUE(gemv_swiglu_preferred(M, 3584, 9472)) << M;  // 136 MB
  EXPECT_TRUE(gemv_swiglu_preferred(1, 3584, 18944));
  EXPECT_FALSE(gemv_swiglu_preferred(2, 3584, 18944));  // 271 MB
  for (const int64_t M : {0, 3, 8}) EXPECT_FALSE(gemv_swiglu_preferred(M, 1536, 8960)) << M;
  EXPECT_FALSE(gemv_swiglu_preferred(1, 1536, 0));
}

}  // namespace
}  // namespace dapo::ops::plan
