// The host plans of CUDA's fused gate/up + SwiGLU (ops/plan/swiglu_plan.h)
// and the decode step's norm-fold rule, without a GPU: the fused path up to
// its row bounds, tiles of the built widths with a deep ring exactly where
// the grid is one CTA an SM, the wide kernel only where its weights stay in
// L2, and folding where the measurements found it faster.
#include "dapo/ops/plan/swiglu_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dapo::ops::plan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Qwen2.5's MLP shapes (K = hidden size, I = intermediate size) at tp = 1.
struct Mlp {
  const char* name;
  int64_t K, I;
};
constexpr Mlp kMlps[] = {{"0.5B", 896, 4864}, {"1.5B", 1536, 8960}, {"7B", 3584, 18944}};

TEST(SwigluPlan, FusedUpTo128RowsAnd256OnSmallMatrices) {
  for (const Mlp& m : kMlps) {
    SCOPED_TRACE(m.name);
    EXPECT_FALSE(swiglu_fused_preferred(0, m.K, m.I));
    for (const int64_t M : {1, 17, 64, 128}) EXPECT_TRUE(swiglu_fused_preferred(M, m.K, m.I)) << M;
    EXPECT_FALSE(swiglu_fused_preferred(257, m.K, m.I));
  }
  // 129 to 256 rows: only up to 8 Mi weights a matrix (0.5B: 4.4 Mi; 1.5B: 13.8 Mi).
  EXPECT_TRUE(swiglu_fused_preferred(256, 896, 4864));
  EXPECT_FALSE(swiglu_fused_preferred(129, 1536, 8960));
}

TEST(SwigluPlan, TilesAreBuiltWidthsAndDeepWhereTheGridIsOneWave) {
  for (const int sms : {66, 132})
    for (const Mlp& m : kMlps)
      for (const int64_t M : {0, 1, 64, 65, 128, 256}) {
        SCOPED_TRACE(testing::Message() << m.name << " M " << M << " SMs " << sms);
        const SwigluPlan p = swiglu_fused_plan(M, m.K, m.I, sms);
        EXPECT_EQ(p.rows, M <= 64 ? 64 : 128);
        EXPECT_NE(std::find(kSwigluWidths.begin(), kSwigluWidths.end(), p.cols), kSwigluWidths.end());
        const int64_t ctas = ceil_div(m.I, p.cols) * ceil_div(std::max<int64_t>(M, 1), p.rows);
        EXPECT_EQ(p.deep, ctas <= sms);
        const SwigluPlan again = swiglu_fused_plan(M, m.K, m.I, sms);
        EXPECT_TRUE(again.cols == p.cols && again.rows == p.rows && again.deep == p.deep);
      }
  // 40 columns but for large matrices (7B's 68 Mi weights) at up to 64 rows: 80.
  EXPECT_EQ(swiglu_fused_plan(64, 3584, 18944, 132).cols, 80);
  EXPECT_EQ(swiglu_fused_plan(65, 3584, 18944, 132).cols, 40);
  EXPECT_EQ(swiglu_fused_plan(1, 896, 4864, 132).cols, 40);
  // The measured decode graphs: 0.5B at 128 rows is 122 CTAs (deep on an
  // H100's 132 SMs), 1.5B is 224 (two CTAs an SM share it: not deep).
  EXPECT_TRUE(swiglu_fused_plan(128, 896, 4864, 132).deep);
  EXPECT_FALSE(swiglu_fused_plan(128, 1536, 8960, 132).deep);
}

TEST(SwigluPlan, WideKernelOnlyWhereItsWeightsStayInL2) {
  EXPECT_TRUE(swiglu_wide_preferred(1024, 896, 4864, true));
  EXPECT_TRUE(swiglu_wide_preferred(32768, 896, 4864, true));
  EXPECT_FALSE(swiglu_wide_preferred(512, 896, 4864, true));    // below 1,024 rows
  EXPECT_FALSE(swiglu_wide_preferred(4096, 1536, 8960, true));  // 55 MB of weights
  EXPECT_FALSE(swiglu_wide_preferred(4096, 3584, 18944, true));
  EXPECT_FALSE(swiglu_wide_preferred(4096, 896, 4864, false));  // not built
  EXPECT_FALSE(swiglu_wide_preferred(4096, 896, kSwigluWideCols - 1, true));  // less than one item's columns
  EXPECT_FALSE(swiglu_wide_preferred(4096, 2 * kSwigluBK - 8, 4864, true));   // under two k-blocks
  EXPECT_TRUE(swiglu_wide_preferred(4096, 2 * kSwigluBK, 4864, true));
}

TEST(SwigluPlan, NormFoldWhereTheDecodeStepMeasuredItFaster) {
  SkinnyGpu h100;
  h100.sm_count = 132;
  h100.wgmma = true;
  // 0.5B: the gate/up tile is deep up to 128 rows and o_proj's fold runs
  // in one wave (1.33 -> 1.30 ms at 128 rows).
  for (const int64_t M : {3, 64, 100, 128}) EXPECT_TRUE(norm_fold_preferred(M, 896, 4864, h100)) << M;
  // At 1 and 2 rows the small-batch kernel (gemv_plan.h) takes gate/up, on
  // normed rows.
  for (const int64_t M : {1, 2}) EXPECT_FALSE(norm_fold_preferred(M, 896, 4864, h100)) << M;
  EXPECT_FALSE(norm_fold_preferred(0, 896, 4864, h100));
  EXPECT_FALSE(norm_fold_preferred(129, 896, 4864, h100));
  // 1.5B at 128 rows: the gate/up grid is 224 CTAs, not deep (2.66 -> 2.83 ms folded).
  EXPECT_FALSE(norm_fold_preferred(128, 1536, 8960, h100));
  // A hidden size the folded stores cannot take (4 adjacent outputs).
  EXPECT_FALSE(norm_fold_preferred(64, 898, 4864, h100));
  // Above 64 rows it also needs o_proj's one-wave fold. C = I = 1024 at
  // 128 rows: 26 gate/up CTAs (deep), a fold of 16 x 2 tiles x 4 splits =
  // 128 CTAs: one wave on 132 SMs, not on 120 (where 64 rows still fold).
  SkinnyGpu smaller = h100;
  smaller.sm_count = 120;
  EXPECT_TRUE(norm_fold_preferred(128, 1024, 1024, h100));
  EXPECT_FALSE(norm_fold_preferred(128, 1024, 1024, smaller));
  EXPECT_TRUE(norm_fold_preferred(64, 1024, 1024, smaller));
  // Nor without the sm_90a tiles.
  SkinnyGpu no_wgmma = h100;
  no_wgmma.wgmma = false;
  EXPECT_FALSE(norm_fold_preferred(128, 896, 4864, no_wgmma));
}

}  // namespace
}  // namespace dapo::ops::plan
