// The host plans of CUDA's skinny GEMM (ops/plan/skinny_gemm_plan.h),
// without a GPU: every tile of the table fits a CTA and is what its comment
// says, the routing rule sends the shapes its measurements name to the
// kernel or to cuBLASLt, every plan names a tile of the build with 1..8 K
// splits of at least two k-blocks whose clusters fit, the RoPE and fold
// variants keep the plan's splits, and the same inputs give the same plan.
#include "dapo/ops/plan/skinny_gemm_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace dapo::ops::plan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A model of the GPU's cluster occupancy: CTAs an SM holds by shared memory
// (228 KB, 1 KB reserved a CTA) and threads (2,048), clusters of `splits`
// within GPCs of 16 SMs (the .cu's estimate when the runtime cannot say).
int64_t model_clusters(int config, int splits, int sms) {
  const SkinnyTile& t = kSkinnyTiles[size_t(config)];
  const int per_sm = std::max(1, std::min(228 * 1024 / (t.smem_bytes() + 1024), 2048 / t.threads()));
  return int64_t(sms / 16) * ((16 * per_sm) / splits);
}

SkinnyGpu gpu(int sms, bool wgmma) {
  SkinnyGpu g;
  g.sm_count = sms;
  g.wgmma = wgmma;
  g.resident_clusters = [sms](int config, int splits) { return model_clusters(config, splits, sms); };
  return g;
}

bool same(const SkinnyPlan& a, const SkinnyPlan& b) {
  return a.config == b.config && a.splits == b.splits && a.l2_prefetch == b.l2_prefetch && a.pdl == b.pdl &&
         a.lookahead == b.lookahead;
}

// Qwen2.5's projections (weight rows per segment, K) at tp = 1.
struct Shape {
  const char* name;
  std::vector<int64_t> rows;
  int64_t K;
};
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"0.5B qkv", {896, 128, 128}, 896},    {"0.5B o", {896}, 896},
      {"0.5B gate+up", {4864, 4864}, 896},   {"0.5B down", {896}, 4864},
      {"0.5B lm_head", {151936}, 896},       {"1.5B qkv", {1536, 256, 256}, 1536},
      {"1.5B down", {1536}, 8960},           {"7B qkv", {3584, 512, 512}, 3584},
      {"7B o", {3584}, 3584},                {"7B down", {3584}, 18944},
      {"0.5B k", {128}, 896},                {"odd K", {200, 40}, 100},
  };
  return s;
}

TEST(SkinnyGemmPlan, EveryTileFitsAndIsWhatItsCommentSays) {
  // bn x bm, threads and shared memory (KB) as the table's comments give them.
  struct Want {
    int bn, bm, threads, kb;
  };
  const Want want[] = {{64, 8, 128, 72},     {64, 16, 128, 80},    {64, 32, 128, 96},    {64, 64, 128, 96},
                       {64, 32, 64, 96},     {128, 8, 128, 102},   {64, 128, 128, 96},   {128, 128, 256, 128},
                       {128, 256, 512, 192}, {64, 256, 256, 160},  {128, 128, 256, 96},  {128, 64, 256, 96},
                       {64, 64, 128, 96},    {64, 128, 128, 96},   {128, 128, 256, 96},  {128, 128, 256, 160},
                       {128, 256, 256, 144}, {256, 128, 512, 144}, {256, 64, 512, 160},  {192, 128, 384, 160},
                       {128, 64, 256, 96},   {128, 128, 384, 160}, {256, 128, 640, 192}, {128, 64, 384, 144},
                       {64, 128, 256, 192},  {64, 64, 256, 160}};
  ASSERT_EQ(std::size(want), kSkinnyTiles.size());
  for (size_t i = 0; i < kSkinnyTiles.size(); ++i) {
    const SkinnyTile& t = kSkinnyTiles[i];
    SCOPED_TRACE(testing::Message() << "tile " << i);
    EXPECT_EQ(t.bn(), want[i].bn);
    EXPECT_EQ(t.bm(), want[i].bm);
    EXPECT_EQ(t.threads(), want[i].threads);
    // The comments give the pipeline's KB; the barriers and the rows' rstd add under 2 KB.
    EXPECT_EQ(t.pipe_bytes() / 1024, want[i].kb);
    EXPECT_LT(t.smem_bytes() - t.pipe_bytes(), 2048);
    EXPECT_LE(t.threads(), 1024);
    EXPECT_EQ(t.threads() % 32, 0);
    EXPECT_LE(t.smem_bytes(), 227 * 1024);  // an H100/H200 CTA's most
    EXPECT_EQ(t.wgmma, i >= size_t(kSkinnyMmaTiles));
    // The staged fp32 output tile reuses the pipeline, and the barriers and
    // the rows' rstd lie past both.
    EXPECT_GE(t.rstd_offset(), t.bm() * t.out_ld() * 4);
    EXPECT_GE(t.rstd_offset(), t.stages * t.stage_bytes());
    if (t.wgmma) {  // warpgroups of 64 weight rows x all the tile's input rows
      EXPECT_EQ(t.mt, 1);
      EXPECT_EQ(t.wm, 1);
      EXPECT_EQ(t.wn % 4, 0);
      EXPECT_TRUE(t.bm() == 64 || t.bm() == 128 || t.bm() == 256);
    }
    if (t.tma) {
      EXPECT_TRUE(t.wgmma);
      EXPECT_EQ(t.barrier_offset() % 1024, 0);
    }
  }
  EXPECT_EQ(skinny_tile_count(false), 12);
  EXPECT_EQ(skinny_tile_count(true), 26);
}

TEST(SkinnyGemmPlan, KSplitsAreNeverEmpty) {
  for (int64_t k_blocks = 1; k_blocks <= 300; ++k_blocks)
    for (int64_t want = 0; want <= 10; ++want) {
      const int64_t per = skinny_k_blocks_per_split(k_blocks, want), splits = skinny_splits_run(k_blocks, want);
      SCOPED_TRACE(testing::Message() << "k_blocks " << k_blocks << " want " << want);
      EXPECT_GE(splits, 1);
      EXPECT_LE(splits, std::max<int64_t>(want, 1));
      EXPECT_LT((splits - 1) * per, k_blocks);  // the last split has k-blocks
      EXPECT_GE(splits * per, k_blocks);        // and every k-block a split
    }
  EXPECT_EQ(skinny_splits_run(0, 4), 1);  // no k-block: one (empty) split, no division by zero
}

// The routing rule on the shapes its comment measures.
TEST(SkinnyGemmPlan, PreferredWhereTheSweepMeasuredIt) {
  const std::vector<int64_t> qkv05 = {896, 128, 128}, qkv7 = {3584, 512, 512}, o05 = {896}, down05 = {896},
                             lm05 = {151936}, gate05 = {4864}, gate_up05 = {4864, 4864}, gate_up15 = {8960, 8960},
                             down15 = {1536}, k05 = {128};
  for (const bool wgmma : {false, true}) {
    SCOPED_TRACE(testing::Message() << "wgmma " << wgmma);
    // No rows, or more than 256: cuBLASLt (or nothing).
    EXPECT_FALSE(skinny_preferred(0, 896, qkv05, wgmma));
    EXPECT_FALSE(skinny_preferred(257, 896, qkv05, wgmma));
    // Up to 8 rows: everything but single matrices of 10 to 200 MB and
    // gate or up alone; the LM heads stay.
    EXPECT_TRUE(skinny_preferred(1, 896, qkv05, wgmma));
    EXPECT_TRUE(skinny_preferred(8, 896, o05, wgmma));
    EXPECT_TRUE(skinny_preferred(1, 896, lm05, wgmma));
    EXPECT_FALSE(skinny_preferred(1, 8960, down15, wgmma));  // 27.5 MB
    EXPECT_FALSE(skinny_preferred(4, 896, gate05, wgmma));
    // 9 to 32 rows: two fused segments up to 24 MB, long-K products of 0.5 to 16 MB.
    EXPECT_TRUE(skinny_preferred(32, 896, gate_up05, wgmma));    // 17.4 MB
    EXPECT_FALSE(skinny_preferred(32, 1536, gate_up15, wgmma));  // 55 MB
    EXPECT_TRUE(skinny_preferred(16, 4864, down05, wgmma));      // K >= 4 rows, 8.7 MB
    EXPECT_FALSE(skinny_preferred(16, 896, o05, wgmma));         // square: cuBLASLt
    // q/k/v fused up to 64 rows on every shape.
    EXPECT_TRUE(skinny_preferred(64, 3584, qkv7, wgmma));
    // Gate/up and o from 33 rows: cuBLASLt.
    EXPECT_FALSE(skinny_preferred(64, 896, gate_up05, wgmma));
    EXPECT_FALSE(skinny_preferred(64, 896, o05, wgmma));
  }
  // mma.sync tiles from 33 rows: q/k/v only, up to 20 MB at 128 rows and 8 MB at 256.
  EXPECT_TRUE(skinny_preferred(128, 896, qkv05, false));    // 2.1 MB
  EXPECT_FALSE(skinny_preferred(128, 3584, qkv7, false));   // 32.9 MB
  EXPECT_TRUE(skinny_preferred(256, 896, qkv05, false));
  EXPECT_FALSE(skinny_preferred(64, 4864, down05, false));  // long K alone stops at 32 rows
  // wgmma tiles: q/k/v up to 128 rows (at 256 up to 4 MB), long-K products
  // and LM heads up to 64 rows, down (TMA tiles) up to 128.
  EXPECT_TRUE(skinny_preferred(128, 3584, qkv7, true));
  EXPECT_FALSE(skinny_preferred(256, 3584, qkv7, true));
  EXPECT_TRUE(skinny_preferred(256, 896, qkv05, true));  // 2.1 MB
  EXPECT_TRUE(skinny_preferred(64, 896, lm05, true));
  EXPECT_FALSE(skinny_preferred(65, 896, lm05, true));
  EXPECT_TRUE(skinny_preferred(128, 4864, down05, true));
  EXPECT_FALSE(skinny_preferred(129, 4864, down05, true));
  EXPECT_TRUE(skinny_preferred(64, 896, k05, true));  // a lone k_proj: long K at 64 rows
  EXPECT_FALSE(skinny_preferred(65, 896, k05, true));  // not a TMA shape (under 512 rows)
}

// Every plan names a tile of the build and 1..8 splits of two or more
// k-blocks, its L2 options follow their rules, and it is a function of its
// inputs alone.
TEST(SkinnyGemmPlan, EveryPlanIsValidAndDeterministic) {
  for (const bool wgmma : {false, true})
    for (const int sms : {66, 114, 132})
      for (const Shape& s : shapes())
        for (const int64_t M : {1, 7, 8, 9, 16, 17, 32, 33, 64, 65, 100, 128, 129, 256}) {
          SCOPED_TRACE(testing::Message() << s.name << " M " << M << " SMs " << sms << " wgmma " << wgmma);
          const SkinnyGpu g = gpu(sms, wgmma);
          const SkinnyPlan p = skinny_plan(M, s.K, s.rows, g);
          ASSERT_GE(p.config, 0);
          ASSERT_LT(p.config, skinny_tile_count(wgmma));
          EXPECT_GE(p.splits, 1);
          EXPECT_LE(p.splits, kSkinnyMaxSplits);
          const int64_t k_blocks = ceil_div(s.K, kSkinnyBK);
          if (p.splits > 1) EXPECT_LE(p.splits * kSkinnyMinKBlocksPerSplit, k_blocks);
          if (k_blocks < 64) EXPECT_LE(p.splits, 6);
          EXPECT_EQ(skinny_splits_run(k_blocks, p.splits), p.splits);  // what runs is what was planned
          EXPECT_TRUE(p.lookahead == 0 || p.lookahead == 4);
          EXPECT_TRUE(p.pdl);
          const SkinnyTile& t = kSkinnyTiles[size_t(p.config)];
          int64_t tiles = 0;
          for (const int64_t r : s.rows) tiles += ceil_div(r, t.bn());
          tiles *= ceil_div(M, t.bm());
          if (!t.tma) {
            EXPECT_EQ(p.l2_prefetch, p.splits == 1 && M <= 64);
            if (p.lookahead > 0) EXPECT_LE(tiles, g.resident_clusters(p.config, p.splits));  // one wave
          } else {
            EXPECT_FALSE(p.l2_prefetch);
            EXPECT_EQ(p.lookahead, 0);
          }
          // The same inputs, and another GPU object of the same SMs: the same plan.
          EXPECT_TRUE(same(p, skinny_plan(M, s.K, s.rows, g)));
          EXPECT_TRUE(same(p, skinny_plan(M, s.K, s.rows, gpu(sms, wgmma))));
        }
}

// The tiles each rule picks, and the splits bounded by what the GPU holds.
TEST(SkinnyGemmPlan, TilesAndSplitsFollowTheRules) {
  const SkinnyGpu mma = gpu(132, false), hopper = gpu(132, true);
  const std::vector<int64_t> qkv05 = {896, 128, 128}, qkv7 = {3584, 512, 512}, o05 = {896}, o7 = {3584},
                             down05 = {896};
  // mma.sync tiles by rows: 64 weight rows x M rounded up (at most 64).
  EXPECT_EQ(skinny_plan(1, 896, qkv05, mma).config, kSkinnyMma64x8);
  EXPECT_EQ(skinny_plan(16, 896, qkv05, mma).config, kSkinnyMma64x16);
  EXPECT_EQ(skinny_plan(17, 896, qkv05, mma).config, kSkinnyMma64x32);
  EXPECT_EQ(skinny_plan(64, 896, qkv05, mma).config, kSkinnyMma64x64);
  // From 65 rows: 64 x 64 on small matrices up to 128 rows, then 128 x 64;
  // 128 x 128 (two CTAs an SM) on large ones.
  EXPECT_EQ(skinny_plan(128, 896, o05, mma).config, kSkinnyMma64x64);
  EXPECT_EQ(skinny_plan(129, 896, o05, mma).config, kSkinnyMma128x64);
  EXPECT_EQ(skinny_plan(65, 3584, o7, mma).config, kSkinnyMma128x128);
  // Without wgmma the tiles stay mma.sync at any M; with it, from 33 rows.
  EXPECT_EQ(skinny_plan(32, 896, qkv05, hopper).config, kSkinnyMma64x32);
  // wgmma: q/k/v (3 segments) and long-K products of 512+ rows take TMA
  // tiles, 64 input rows, or 128 from 65 rows past 8 MB of q/k/v and always
  // for a single product.
  const int qkv05_tile = skinny_plan(128, 896, qkv05, hopper).config;  // 2.1 MB
  EXPECT_TRUE(qkv05_tile == kSkinnyTma64x64 || qkv05_tile == kSkinnyTma128x64) << qkv05_tile;
  const int qkv7_tile = skinny_plan(128, 3584, qkv7, hopper).config;  // 32.9 MB
  EXPECT_TRUE(qkv7_tile == kSkinnyTma64x128 || qkv7_tile == kSkinnyTma128x128) << qkv7_tile;
  const int down_tile = skinny_plan(65, 4864, down05, hopper).config;
  EXPECT_TRUE(down_tile == kSkinnyTma64x128 || down_tile == kSkinnyTma128x128) << down_tile;
  const int qkv_low = skinny_plan(64, 3584, qkv7, hopper).config;
  EXPECT_TRUE(qkv_low == kSkinnyTma64x64 || qkv_low == kSkinnyTma128x64) << qkv_low;
  // Others: wgmma 64 x 64, or 64 x 128 from 65 rows past 20 MB.
  EXPECT_EQ(skinny_plan(64, 3584, o7, hopper).config, kSkinnyWgmma64x64);
  EXPECT_EQ(skinny_plan(128, 896, o05, hopper).config, kSkinnyWgmma64x64);
  const std::vector<int64_t> two7 = {3584, 3584};  // 51 MB
  EXPECT_EQ(skinny_plan(128, 3584, two7, hopper).config, kSkinnyWgmma64x128);
  // wgmma plans keep their CTAs within 1.7 an SM when they split.
  for (const int64_t M : {33, 64, 128, 256}) {
    const SkinnyPlan p = skinny_plan(M, 3584, o7, hopper);
    ASSERT_FALSE(kSkinnyTiles[size_t(p.config)].tma);
    const SkinnyTile& t = kSkinnyTiles[size_t(p.config)];
    const int64_t ctas = ceil_div(3584, t.bn()) * ceil_div(M, t.bm()) * p.splits;
    if (p.splits > 1) EXPECT_LE(double(ctas), 1.7 * 132) << "M " << M;
  }
  // mma.sync plans split only while the clusters fit in 90% of what the GPU holds.
  for (const int64_t M : {1, 8, 32, 64}) {
    const SkinnyPlan p = skinny_plan(M, 4864, down05, mma);
    const SkinnyTile& t = kSkinnyTiles[size_t(p.config)];
    const int64_t tiles = ceil_div(896, t.bn()) * ceil_div(M, t.bm());
    if (p.splits > 1) EXPECT_LE(double(tiles), 0.9 * double(mma.resident_clusters(p.config, p.splits))) << M;
    EXPECT_GT(p.splits, 1) << "14 tiles of 76 k-blocks leave most of 132 SMs idle unsplit, M " << M;
  }
  // Fewer SMs never split more.
  for (const Shape& s : shapes())
    for (const int64_t M : {1, 16, 64, 128}) {
      const SkinnyPlan big = skinny_plan(M, s.K, s.rows, gpu(132, false));
      const SkinnyPlan small = skinny_plan(M, s.K, s.rows, gpu(66, false));
      EXPECT_EQ(big.config, small.config);
      EXPECT_LE(small.splits, big.splits) << s.name << " M " << M;
    }
}

TEST(SkinnyGemmPlan, EdgeShapes) {
  const SkinnyGpu g = gpu(132, true);
  // One row of the 0.5B LM head: the smallest tile; 2,374 weight tiles fill
  // the GPU unsplit, not in one wave (no early prefetch), one stream per
  // CTA (L2 prefetch of 256-byte blocks).
  const std::vector<int64_t> lm = {151936};
  const SkinnyPlan head = skinny_plan(1, 896, lm, g);
  EXPECT_EQ(head.config, kSkinnyMma64x8);
  EXPECT_EQ(head.splits, 1);
  EXPECT_TRUE(head.l2_prefetch);
  EXPECT_EQ(head.lookahead, 0);
  // A huge N is still one plan of the table.
  const std::vector<int64_t> huge = {int64_t(1) << 24};
  const SkinnyPlan h = skinny_plan(1, 64, huge, g);
  EXPECT_EQ(h.splits, 1);
  EXPECT_EQ(h.config, kSkinnyMma64x8);
  // K not a multiple of 8 or of 64: whole k-blocks by ceil, splits of at
  // least two of them (K = 100: two k-blocks, no split).
  const std::vector<int64_t> small = {64};
  EXPECT_EQ(skinny_plan(1, 100, small, g).splits, 1);
  EXPECT_EQ(skinny_plan(1, 1, small, g).splits, 1);
  // K = 0 plans without dividing by zero.
  EXPECT_EQ(skinny_plan(1, 0, small, g).splits, 1);
  // A segment of no rows adds no tile: up to 32 rows (where the segment
  // count picks no tile) the plan is that of the other segments.
  const std::vector<int64_t> with_empty = {896, 0, 128}, without = {896, 128};
  EXPECT_TRUE(same(skinny_plan(4, 896, with_empty, g), skinny_plan(4, 896, without, g)));
}

// qkv_rope_kv_write's plan: skinny_plan's K splits, a tile of whole heads
// (its twin of 128 weight rows where the plan's has 64), or none.
TEST(SkinnyGemmPlan, RopePlanKeepsTheSplitsAndHoldsWholeHeads) {
  for (const bool wgmma : {false, true})
    for (const Shape& s : shapes())
      for (const int64_t D : {64, 128, 256})
        for (const int64_t M : {1, 16, 33, 64, 65, 128}) {
          SCOPED_TRACE(testing::Message() << s.name << " D " << D << " M " << M << " wgmma " << wgmma);
          const SkinnyGpu g = gpu(132, wgmma);
          const SkinnyPlan base = skinny_plan(M, s.K, s.rows, g), rope = skinny_rope_plan(M, s.K, s.rows, D, g);
          EXPECT_EQ(rope.splits, base.splits);
          if (rope.config < 0) continue;
          EXPECT_EQ(kSkinnyTiles[size_t(rope.config)].bn() % D, 0);
          EXPECT_EQ(kSkinnyTiles[size_t(rope.config)].bm(), kSkinnyTiles[size_t(base.config)].bm());
          if (rope.config != base.config) EXPECT_TRUE(wgmma);  // only the wgmma tiles have twins
        }
  // Up to 32 rows the tiles are mma.sync 64-row ones: whole heads of 64, none of 128.
  const std::vector<int64_t> qkv = {896, 128, 128};
  const SkinnyGpu g = gpu(132, true);
  EXPECT_EQ(skinny_rope_plan(16, 896, qkv, 64, g).config, skinny_plan(16, 896, qkv, g).config);
  EXPECT_EQ(skinny_rope_plan(16, 896, qkv, 128, g).config, -1);
  // From 33 rows the TMA tiles of 64 input rows: heads of 128 take the
  // 128-row one (the plan's own or the twin of its 64-row one).
  const SkinnyPlan p = skinny_plan(64, 896, qkv, g);
  ASSERT_TRUE(p.config == kSkinnyTma64x64 || p.config == kSkinnyTma128x64) << p.config;
  EXPECT_EQ(skinny_rope_plan(64, 896, qkv, 128, g).config, kSkinnyTma128x64);
  EXPECT_EQ(skinny_rope_plan(64, 896, qkv, 64, g).config, p.config);
  EXPECT_EQ(skinny_rope_plan(64, 896, qkv, 0, g).config, -1);
  // Segments of no rows at all have no tile to hold heads.
  const std::vector<int64_t> empty = {0, 0, 0};
  EXPECT_EQ(skinny_rope_plan(64, 896, empty, 128, g).config, -1);
}

// linear_residual_fold: TMA 64 x 64 tiles with 4 K splits from 65 to 128
// rows where those CTAs fit in one wave (0.5B's o_proj on 132 SMs), else
// skinny_plan's.
TEST(SkinnyGemmPlan, FoldTakesOneWaveTmaTilesWhereTheyFit) {
  const SkinnyGpu g = gpu(132, true);
  EXPECT_TRUE(residual_fold_one_wave(128, 896, 896, g));     // 14 x 2 tiles x 4 splits = 112 CTAs
  EXPECT_FALSE(residual_fold_one_wave(128, 1536, 1536, g));  // 1.5B: 192 CTAs
  EXPECT_FALSE(residual_fold_one_wave(64, 896, 896, g));     // up to 64 rows: skinny_plan's
  EXPECT_FALSE(residual_fold_one_wave(129, 896, 896, g));
  EXPECT_FALSE(residual_fold_one_wave(128, 128, 896, g));  // 2 k-blocks: not 4 splits
  EXPECT_FALSE(residual_fold_one_wave(128, 896, 896, gpu(132, false)));
  EXPECT_FALSE(residual_fold_one_wave(128, 896, 896, gpu(100, true)));  // 112 CTAs on 100 SMs
  const SkinnyPlan fold = residual_fold_plan(128, 896, 896, g);
  EXPECT_EQ(fold.config, kSkinnyTma64x64);
  EXPECT_EQ(fold.splits, 4);
  EXPECT_EQ(fold.lookahead, 0);
  const std::vector<int64_t> o15 = {1536};
  EXPECT_TRUE(same(residual_fold_plan(128, 1536, 1536, g), skinny_plan(128, 1536, o15, g)));
  const std::vector<int64_t> o05 = {896};
  EXPECT_TRUE(same(residual_fold_plan(32, 896, 896, g), skinny_plan(32, 896, o05, g)));
}

}  // namespace
}  // namespace dapo::ops::plan
