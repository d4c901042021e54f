// The host plan of CUDA paged attention (ops/plan/paged_attention_plan.h),
// without a GPU: every plan covers the context in whole CTA steps with no
// empty merge group, its scratch is what the partials take and stays
// under the cap, decode keeps one query split and prefill plain CTAs, the
// tail rule gives clusters of 8, and the same inputs give the same split.
#include "dapo/ops/plan/paged_attention_plan.h"

#include <gtest/gtest.h>

#include "dapo/core/arena.h"

namespace dapo::ops::plan {
namespace {

bool same(const PagedSplit& a, const PagedSplit& b) {
  return a.groups == b.groups && a.cluster == b.cluster && a.qsplit == b.qsplit && a.pdl == b.pdl &&
         a.stages == b.stages;
}

TEST(PagedAttentionPlan, UnitIsTheKernelsStep) {
  // 4 warps of 16 x 128 / D keys (8 KB of K + V per warp step), one
  // 16-key tile per warp from D 128 on.
  EXPECT_EQ(paged_unit(16), 512);
  EXPECT_EQ(paged_unit(32), 256);
  EXPECT_EQ(paged_unit(64), 128);
  EXPECT_EQ(paged_unit(128), 64);
}

TEST(PagedAttentionPlan, EveryPlanCoversTheContextWithNoEmptyGroup) {
  for (const int64_t D : {16, 32, 64, 128})
    for (const int64_t ctx : {1, 63, 64, 65, 1000, 4096, 20480})
      for (const int64_t groups : {1, 2, 3, 7, 64, 1000})
        for (const int64_t cluster : {1, 2, 4, 8}) {
          PagedSplit sp;
          sp.groups = groups;
          sp.cluster = cluster;
          const PagedPlan p = paged_plan_of(4, 14, D, ctx, sp);
          SCOPED_TRACE(testing::Message() << "D " << D << " ctx " << ctx << " groups " << groups << " cluster "
                                          << cluster);
          EXPECT_EQ(p.part_len % paged_unit(D), 0);
          EXPECT_GE(p.groups * p.csize * p.part_len, ctx);         // every key has a CTA
          EXPECT_LT((p.groups - 1) * p.csize * p.part_len, ctx);   // the last group holds keys
          EXPECT_LE(p.groups, std::max<int64_t>(groups, 1));
          EXPECT_EQ(p.csize, cluster);
          if (p.groups == 1) {
            EXPECT_EQ(p.scratch, 0u);
          } else {
            const size_t rows = size_t(4 * 14) * size_t(p.groups);  // (max, sum) and D accumulators per row
            EXPECT_EQ(p.scratch, (2 * rows + rows * size_t(D)) * sizeof(float) + 3 * Arena::kAlign);
          }
        }
}

TEST(PagedAttentionPlan, DecodeAndPrefillSplits) {
  // Qwen2.5-1.5B's attention: 12 query heads over 2 KV heads of dim 128,
  // on a device of 132 SMs x 2 CTAs.
  const int64_t Hq = 12, Hkv = 2, D = 128, resident = 264;
  for (const int64_t B : {1, 8, 64, 256})
    for (const int64_t ctx : {256, 2048, 8192, 20480}) {
      SCOPED_TRACE(testing::Message() << "B " << B << " ctx " << ctx);
      const PagedSplit decode = paged_choose_split(B, B, Hq, Hkv, D, ctx, resident);
      EXPECT_EQ(decode.qsplit, 1);
      EXPECT_EQ(decode.stages, 3);  // the shared-memory kernel
      EXPECT_TRUE(decode.cluster == 1 || decode.cluster == 2 || decode.cluster == 4 || decode.cluster == 8);
      EXPECT_GE(decode.groups, 1);
      const PagedPlan p = paged_plan_of(B, Hq, D, ctx, decode);
      if (p.groups > 1)
        EXPECT_LE(int64_t(B * Hq) * p.groups * (D + 2) * 4, kPagedMaxPartialBytes);
      EXPECT_TRUE(same(decode, paged_choose_split(B, B, Hq, Hkv, D, ctx, resident)));  // no hidden state

      // Prefill of 64 tokens a sequence: the register kernel, plain CTAs,
      // the query tiles of a sequence over up to 64 CTAs.
      const PagedSplit prefill = paged_choose_split(64 * B, B, Hq, Hkv, D, ctx, resident);
      EXPECT_EQ(prefill.stages, 0);
      EXPECT_EQ(prefill.cluster, 1);
      EXPECT_EQ(prefill.qsplit, std::min<int64_t>(64, (std::min<int64_t>(64 * B, ctx) * (Hq / Hkv) + 7) / 8));
    }
  EXPECT_EQ(paged_default_stages(8, 8, 64), 3);
  EXPECT_EQ(paged_default_stages(8, 8, 32), 0);  // the register kernel for D 16 and 32
  EXPECT_EQ(paged_default_stages(9, 8, 128), 0);  // more tokens than sequences: prefill
}

// The tail of a generation round: a few long sequences get clusters of 8
// (4 merge groups of them up to 4 items, one from 5 to 16 items under 8,192
// positions, 16 plain CTAs from there); more items, or contexts under
// 4,096, go to the time model.
TEST(PagedAttentionPlan, TheTailOfARoundGetsClustersOfEight) {
  for (const int64_t B : {1, 2}) {
    const PagedSplit s = paged_choose_split(B, B, 12, 2, 128, 8192, 264);  // 2 or 4 items
    EXPECT_EQ(s.groups, 4);
    EXPECT_EQ(s.cluster, 8);
  }
  const PagedSplit eight = paged_choose_split(8, 8, 12, 2, 128, 4096, 264);  // 16 items
  EXPECT_EQ(eight.groups, 1);
  EXPECT_EQ(eight.cluster, 8);
  // From 8,192 positions, 5 to 16 items take 16 plain CTAs each and the merge.
  for (const int64_t ctx : {8192, 20480}) {
    const PagedSplit longer = paged_choose_split(4, 4, 12, 2, 128, ctx, 264);  // 8 items
    EXPECT_EQ(longer.groups, 16);
    EXPECT_EQ(longer.cluster, 1);
  }
  // 32 items at 8,192 positions: past the rule, the time model spreads
  // each item over more than one CTA (one CTA per item would leave most of
  // the 264 slots idle).
  const PagedSplit many = paged_choose_split(16, 16, 12, 2, 128, 8192, 264);
  EXPECT_GT(many.groups * many.cluster, 1);
  EXPECT_FALSE(many.groups == 1 && many.cluster == 8);
  // A full device's worth of work (256 sequences x 2 KV heads = 512 items,
  // short contexts): one CTA per item is enough.
  const PagedSplit full = paged_choose_split(256, 256, 12, 2, 128, 256, 264);
  EXPECT_EQ(full.groups * full.cluster, 1);
}

}  // namespace
}  // namespace dapo::ops::plan
