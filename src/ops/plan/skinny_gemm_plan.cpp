// The skinny GEMM's plans, on the host (skinny_gemm_plan.h). Every rule was
// measured on an H100 SXM (the tests of tests/gpu/test_linear_multi_gpu.cpp
// named below); an H200 runs the same SMs and plans the same.
#include "dapo/ops/plan/skinny_gemm_plan.h"

#include <algorithm>

namespace dapo::ops::plan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t total_rows(std::span<const int64_t> rows) {
  int64_t n = 0;
  for (const int64_t r : rows) n += r;
  return n;
}

// Weight tiles of bn rows over every segment (a segment of 0 rows has none).
int64_t weight_tiles(std::span<const int64_t> rows, int bn) {
  int64_t t = 0;
  for (const int64_t r : rows) t += ceil_div(r, bn);
  return t;
}

// The output tiles of M input rows under tile `config`.
int64_t output_tiles(int64_t M, std::span<const int64_t> rows, int config) {
  const SkinnyTile& c = kSkinnyTiles[size_t(config)];
  return weight_tiles(rows, c.bn()) * ceil_div(M, c.bm());
}

// The most K splits a plan considers: splits of 2 or more k-blocks, at
// most 6 but for long K (8: down_proj).
int64_t most_splits(int64_t k_blocks) {
  return std::min<int64_t>(k_blocks >= 64 ? kSkinnyMaxSplits : 6, k_blocks / kSkinnyMinKBlocksPerSplit);
}

// Whether M rows take the wgmma tiles (an sm_90a build, from 33 rows).
bool uses_wgmma(int64_t M, bool wgmma) { return wgmma && M > 32; }

// The plan's L2 hints for a chosen config and split.
void set_prefetch(SkinnyPlan& p, int64_t M, int64_t tiles, int64_t k_blocks, const SkinnyGpu& gpu) {
  // One stream per CTA over many k-blocks: asking L2 for 256-byte blocks
  // helps there (the LM head: 3-5%), nowhere else measurably.
  p.l2_prefetch = p.splits == 1 && M <= 64;
  // The early L2 prefetch pays where the whole grid starts at once and each
  // CTA has few k-blocks (0.5B o or q/k/v: 3.2 us against 3.5); with 10 or
  // more it cost 5% (0.5B down, 1 row: 6.7 us against 6.2).
  const bool one_wave = tiles <= gpu.resident_clusters(p.config, p.splits);
  p.lookahead = one_wave && skinny_k_blocks_per_split(k_blocks, p.splits) <= 8 ? 4 : 0;
}

// From 33 rows on an sm_90a build: a wgmma tile of 64 weight rows x 64 input
// rows, or x 128 from 65 rows on more than 20 MB of weights (7B q/k/v at 128
// rows: 19.5 us against 26.8), and the most K splits (up to 6, 8 for long
// K) whose CTAs stay within 1.7 per SM: in the sweep more splits cost more
// in the cluster's merge than they gained (1.5B q/k/v, 128 rows: 7.7 us at
// 2 splits, 8.3 at 3, 11.9 at 4). On the shapes it routes this lands within
// 13% of the best swept plan (7B tp-2 q/k/v at 128 rows), within 3% on most.
SkinnyPlan wgmma_plan(int64_t M, int64_t K, std::span<const int64_t> rows, const SkinnyGpu& gpu) {
  SkinnyPlan p;
  const double bytes = 2.0 * double(total_rows(rows)) * double(K);
  p.config = M <= 64 || bytes <= 20e6 ? kSkinnyWgmma64x64 : kSkinnyWgmma64x128;
  const int64_t tiles = output_tiles(M, rows, p.config);
  const int64_t k_blocks = ceil_div(K, kSkinnyBK);
  const int64_t most = most_splits(k_blocks);
  const double cap = 1.7 * double(gpu.sm_count);
  int64_t s = 1;
  for (int64_t want = 2; want <= most; ++want) {
    const int64_t splits = skinny_splits_run(k_blocks, want);
    if (double(tiles * splits) > cap) break;
    s = splits;
  }
  p.splits = int(s);
  set_prefetch(p, M, tiles, k_blocks, gpu);
  return p;
}

// TMA tiles (sm_90a) for q/k/v (3+ segments) and long-K single products
// of 512 rows or more (down_proj; not a lone k_proj, where cuBLASLt wins at
// 65-128 rows) from 33 rows: 64 input rows a tile, or 128 from 65 rows where
// the q/k/v weights pass 8 MB and always for down_proj; 64 or 128 weight
// rows, whichever (with the most K splits up to 4 whose clusters the GPU
// holds at once) runs the most CTAs, 64 on a tie. The H100 sweep at 128
// rows (`bench_ops_gpu --op linear_multi --sweep`, best plan us against cuBLASLt) picked these tiles
// and splits on every shape: 0.5B q/k/v 5.05 / 8.09, down 7.77 / 8.34;
// 1.5B q/k/v 6.47 / 10.51, down 14.36 / 15.20; 7B q/k/v 17.5 / 20.3, down
// 54.2 / 59.0.
bool tma_shape(int64_t K, std::span<const int64_t> rows, bool wgmma) {
  const int64_t n = total_rows(rows);
  return wgmma && (rows.size() >= 3 || (rows.size() == 1 && K >= 4 * n && n >= 512));
}

SkinnyPlan tma_plan(int64_t M, int64_t K, std::span<const int64_t> rows, const SkinnyGpu& gpu) {
  const double bytes = 2.0 * double(total_rows(rows)) * double(K);
  const bool tall = M > 64 && (rows.size() == 1 || bytes > 8e6);
  const int64_t k_blocks = ceil_div(K, kSkinnyBK);
  const int64_t most = std::min<int64_t>(4, most_splits(k_blocks));
  SkinnyPlan best;
  int64_t best_ctas = 0;
  for (const int config : {tall ? kSkinnyTma64x128 : kSkinnyTma64x64, tall ? kSkinnyTma128x128 : kSkinnyTma128x64}) {
    const int64_t tiles = output_tiles(M, rows, config);
    int64_t s = 1;
    for (int64_t want = 2; want <= most; ++want) {
      const int64_t splits = skinny_splits_run(k_blocks, want);
      if (tiles > gpu.resident_clusters(config, int(splits))) break;
      s = splits;
    }
    if (tiles * s > best_ctas) {
      best_ctas = tiles * s;
      best.config = config;
      best.splits = int(s);
    }
  }
  best.l2_prefetch = false;
  best.lookahead = 0;
  return best;
}

}  // namespace

int64_t skinny_k_blocks_per_split(int64_t k_blocks, int64_t splits) {
  return ceil_div(k_blocks, std::clamp<int64_t>(splits, 1, std::max<int64_t>(k_blocks, 1)));
}

int64_t skinny_splits_run(int64_t k_blocks, int64_t splits) {
  const int64_t per_split = skinny_k_blocks_per_split(k_blocks, splits);
  return per_split > 0 ? ceil_div(k_blocks, per_split) : 1;
}

// Measured on an H100 SXM, 30-50 calls in a CUDA graph, weights rotating
// through 960 MB (cold L2): `bench_ops_gpu --op linear_multi [--sweep]` of
// tests/gpu/test_linear_multi_gpu.cpp, Qwen2.5 0.5B, 1.5B, 7B and 7B tp-2
// shards. cuBLASLt's wgmma kernels read large matrices at 2.0-2.6 TB/s from
// 32 rows up and out-compute mma.sync from 64 rows (at 256 rows the skinny
// kernel tops out near 330 TFLOPS, half their speed). The kernel wins on
// launches saved (q/k/v fused: one launch against three), few rows, and
// small or long-K matrices at up to 32 rows.
// - q/k/v fused (3+ segments): M <= 64, M <= 128 up to 20 MB, M <= 256 up
//   to 8 MB (0.5B, 128 rows: 6.1 us against 11.9; 7B, 64 rows: 21.0
//   against 27.0; 7B, 128 rows: 29.7 against 27.7, so cuBLASLt).
// - M <= 8: all but single matrices of 10 to 200 MB (1.5B down: 15.4
//   against 13.7 us; 7B o: 13.4 against 11.2; 7B down: 57.5 against 52.5;
//   the LM heads stay: 0.5B 94 against 98.5) and gate or up alone (0.5B:
//   6.2 against 5.4).
// - M <= 32: two fused segments up to 24 MB (0.5B gate+up: 10.3 against
//   11.0 us), and long-K products of 0.5 to 16 MB (0.5B down: 7.3 against
//   7.9).
// With the wgmma configurations (an sm_90a build), from 33 rows up, the
// same H100 sweep at 64, 128 and 256 rows (`--sweep --shape M=64:128:256`): they beat
// the mma.sync tiles everywhere and cuBLASLt on q/k/v fused (0.5B, 128
// rows: 5.5 us against 8.3; 1.5B: 7.6 against 11.0; 7B: 18.3 against 20.4;
// 7B tp-2: 12.0 against 16.0; up to 128 rows, and at 256 rows on up to 4 MB:
// 0.5B 6.4 against 8.8, where the 1.5B and 7B q/k/v split badly), and at up
// to 64 rows on long-K products and LM heads (0.5B down: 7.2 against 8.3;
// 7B down: 51.8 against 54.7; 0.5B LM head: 112.6 against 118.1). The TMA
// tiles (tma_plan) took q/k/v and down over from them and moved down's
// bound to 128 rows (down, 128 rows: 0.5B 7.9 against 8.3, 1.5B 14.4
// against 15.2, 7B 54.0 against 59.1; at 256 rows cuBLASLt: 0.5B 9.7
// against 10.0). cuBLASLt keeps gate/up (0.5B, 128 rows: 9.0 against 12.0
// for the best TMA plan), o, a lone k_proj from 65 rows, down from 129 rows
// and the LM head from 65 rows.
bool skinny_preferred(int64_t M, int64_t K, std::span<const int64_t> rows, bool wgmma) {
  if (M < 1 || M > 256) return false;
  const int64_t n = total_rows(rows);
  const size_t segments = rows.size();
  const double bytes = 2.0 * double(n) * double(K);
  if (uses_wgmma(M, wgmma))
    return (segments >= 3 && (M <= 128 || bytes <= 4e6)) ||
           (segments == 1 && ((M <= 64 && (K >= 4 * n || n >= 65536)) || (M <= 128 && tma_shape(K, rows, wgmma))));
  if (segments >= 3 && (M <= 64 || bytes <= (M <= 128 ? 20e6 : 8e6))) return true;
  if (M <= 8) return !(segments == 1 && ((bytes > 10e6 && bytes <= 200e6) || (n >= 4096 && bytes <= 64e6)));
  if (M > 32) return false;
  return (segments == 2 && bytes <= 24e6) || (K >= 4 * n && bytes >= 0.5e6 && bytes <= 16e6);
}

SkinnyPlan skinny_plan(int64_t M, int64_t K, std::span<const int64_t> rows, const SkinnyGpu& gpu) {
  if (uses_wgmma(M, gpu.wgmma)) return tma_shape(K, rows, gpu.wgmma) ? tma_plan(M, K, rows, gpu) : wgmma_plan(M, K, rows, gpu);
  SkinnyPlan p;
  // Tiles of 64 weight rows x (M rounded up, at most 64) rows; for more rows
  // 128 x 128 tiles with two CTAs an SM (two m-tiles at 256 rows), or, on
  // small matrices, 64 x 64 (up to 128 rows) and 128 x 64 tiles. From the
  // H100 sweep (`--op linear_multi --sweep`): 128-row tiles also beat these on large
  // matrices at 32-64 rows, but cuBLASLt beats both there.
  const int64_t n = total_rows(rows);
  const bool small = n <= 2048 && n * K <= (int64_t(8) << 20);
  p.config = M <= 8                          ? kSkinnyMma64x8
             : M <= 16                       ? kSkinnyMma64x16
             : M <= 32                       ? kSkinnyMma64x32
             : M <= 64 || (small && M <= 128) ? kSkinnyMma64x64
             : small                         ? kSkinnyMma128x64
                                             : kSkinnyMma128x128;
  const int64_t tiles = output_tiles(M, rows, p.config);
  const int64_t k_blocks = ceil_div(K, kSkinnyBK);
  // The most K splits whose clusters all fit on the GPU at once, with a
  // tenth to spare: a second wave of clusters costs more than the split
  // saves (an H100 ran 0.5B q/k/v at 128 rows in 10.7 us with 7 splits,
  // whose 36 clusters did not all fit, and 6.1 us with 5); 5 and 7 happen
  // when a split count does not divide the k-blocks evenly.
  const int64_t most = most_splits(k_blocks);
  int64_t s = 1;
  for (const int64_t want : {2, 3, 4, 6, 8}) {
    if (want > most) break;
    const int64_t splits = skinny_splits_run(k_blocks, want);
    if (double(tiles) > 0.9 * double(gpu.resident_clusters(p.config, int(splits)))) break;
    s = splits;
  }
  p.splits = int(s);
  set_prefetch(p, M, tiles, k_blocks, gpu);
  return p;
}

SkinnyPlan skinny_rope_plan(int64_t M, int64_t K, std::span<const int64_t> rows, int64_t head_dim,
                            const SkinnyGpu& gpu) {
  SkinnyPlan p = skinny_plan(M, K, rows, gpu);
  if (head_dim <= 0 || p.config < 0) {  // no heads, or no tile at all (segments of no rows)
    p.config = -1;
    return p;
  }
  // A tile of 128 weight rows for one of 64, the same K splits: each
  // output's sum runs over the same k-blocks in the same order, so the bits
  // are the plan's. Not below 33 rows: there the twin's halved CTA count
  // cost more than the launch it saves (H100, 1.5B decode step at 4
  // sequences: 2.199 ms against 2.165 with the two ops).
  auto twin = [&](int config) {
    if (!gpu.wgmma) return -1;
    if (config == kSkinnyWgmma64x64) return kSkinnyWgmma128x64;
    if (config == kSkinnyWgmma64x128) return kSkinnyWgmma128x128;
    if (config == kSkinnyTma64x64) return kSkinnyTma128x64;
    if (config == kSkinnyTma64x128) return kSkinnyTma128x128;
    return -1;
  };
  auto whole_heads = [&](int config) { return kSkinnyTiles[size_t(config)].bn() % head_dim == 0; };
  if (!whole_heads(p.config)) p.config = twin(p.config);
  if (p.config < 0 || !whole_heads(p.config)) p.config = -1;
  return p;
}

bool residual_fold_one_wave(int64_t M, int64_t K, int64_t N, const SkinnyGpu& gpu) {
  if (!gpu.wgmma || M <= 64 || M > 128) return false;
  const int64_t splits = skinny_splits_run(ceil_div(K, kSkinnyBK), 4);
  return splits == 4 && ceil_div(N, 64) * ceil_div(M, 64) * splits <= gpu.sm_count;
}

// linear_residual_fold's plan: from 65 to 128 rows, TMA tiles of 64 x 64
// with 4 K splits where those CTAs run in one wave, else skinny_plan's. In
// the H100 0.5B decode step (128 rows) against skinny_plan's: o_proj 64 x 64
// wgmma tiles -> TMA 64 x 64 x 4 splits, the step 1.325 -> 1.305 ms; down
// TMA 64 x 128 -> 64 x 64, 1.325 -> 1.314 (the other tiles and split counts
// swept were slower: 64 x 128, 128 x 64, 128 x 128 tiles, 2, 7 or 8 splits).
// At the 1.5B shapes those CTAs do not fit in one wave (o: 2.86 ms against
// 2.80 with skinny_plan's).
SkinnyPlan residual_fold_plan(int64_t M, int64_t K, int64_t N, const SkinnyGpu& gpu) {
  if (residual_fold_one_wave(M, K, N, gpu)) {
    SkinnyPlan p;
    p.config = kSkinnyTma64x64;
    p.splits = 4;
    return p;
  }
  const int64_t rows[] = {N};
  return skinny_plan(M, K, rows, gpu);
}

}  // namespace dapo::ops::plan
