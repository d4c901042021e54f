// How CUDA's skinny GEMM (matmul.h: the decode step's products of few
// rows by every weight) is configured, planned on the host from plain
// values: the shape (M input rows, K, the weight rows of each segment), the
// GPU's SM count, whether the sm_90a tiles are built, and how many clusters
// of a tile the GPU holds at once. Plan on the host, run on the device (as
// flashinfer separates them): the kernel file (cuda/gemm/linear_multi.cu)
// instantiates its kernels from kSkinnyTiles, asks the device for its SMs
// and cluster occupancy, and launches what these functions decide; the
// decisions are tested without a GPU (tests/ops/test_skinny_gemm_plan.cpp).
//
// The same inputs give the same plan, so the same call on the same GPU
// gives the same bits: the plan fixes the K splits and so the fp32
// summation order.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>

namespace dapo::ops::plan {

// Kernel constants the plans depend on.
inline constexpr int kSkinnyBK = 64;                  // k per pipeline stage: 128 bytes of a bf16 row
inline constexpr int kSkinnyMaxSplits = 8;            // K splits are a cluster: the portable cluster size
inline constexpr int kSkinnyMinKBlocksPerSplit = 2;   // fewer k-blocks a split do not pay its merge
inline constexpr int kSkinnyProducerThreads = 128;    // a TMA tile's producer warpgroup

// A CTA configuration of the kernel: warps of 16 * mt weight rows x 8 * nt
// input rows, wn x wm of them, `stages` k-blocks in flight. wgmma: Hopper's
// warpgroup MMA instead of mma.sync (each warpgroup 64 weight rows x all bm
// input rows); tma: a producer warpgroup feeds the stages by TMA. The
// shared-memory layout below is the kernel's (cuda/gemm/linear_multi.cu
// takes every size from here).
struct SkinnyTile {
  int mt = 1, nt = 1, wn = 1, wm = 1, stages = 1;
  bool wgmma = false, tma = false;

  constexpr int bn() const { return 16 * mt * wn; }  // weight rows per CTA
  constexpr int bm() const { return 8 * nt * wm; }   // input rows per CTA
  constexpr int consumer_threads() const { return 32 * wn * wm; }
  constexpr int threads() const { return consumer_threads() + (tma ? kSkinnyProducerThreads : 0); }
  constexpr int stage_bytes() const { return (bn() + bm()) * kSkinnyBK * 2; }
  // Floats per row of the staged fp32 output tile (4 of padding against bank conflicts).
  constexpr int out_ld() const { return bn() + 4; }
  // The pipeline's stages, which the output tile reuses.
  constexpr int pipe_bytes() const {
    return stages * stage_bytes() > bm() * out_ld() * 4 ? stages * stage_bytes() : bm() * out_ld() * 4;
  }
  // TMA: each stage's full and empty mbarriers after the pipeline, 1024-byte aligned.
  constexpr int barrier_offset() const { return (pipe_bytes() + 1023) / 1024 * 1024; }
  // Each input row's rstd under a folded norm, past everything else.
  constexpr int rstd_offset() const { return ((tma ? barrier_offset() + 16 * stages : pipe_bytes()) + 15) / 16 * 16; }
  constexpr int smem_bytes() const { return rstd_offset() + bm() * 4; }
};

// The configuration table: SkinnyPlan::config indexes it, and the kernel
// file instantiates one kernel per entry. Few input rows need little
// arithmetic, so their CTAs are small and deep (many k-blocks of weights in
// flight per SM); many rows need the larger warp tiles.
inline constexpr std::array<SkinnyTile, 26> kSkinnyTiles = {{
    //  mt nt  wn wm stages wgmma  tma     bn x bm, threads, shared memory
    {1, 1, 4, 1, 8},                    //  0: 64 x 8,    128, 72 KB
    {1, 2, 4, 1, 8},                    //  1: 64 x 16,   128, 80 KB
    {1, 4, 4, 1, 8},                    //  2: 64 x 32,   128, 96 KB
    {1, 8, 4, 1, 6},                    //  3: 64 x 64,   128, 96 KB
    {2, 4, 2, 1, 8},                    //  4: 64 x 32,   64,  96 KB
    {2, 1, 4, 1, 6},                    //  5: 128 x 8,   128, 102 KB
    {2, 8, 2, 2, 4},                    //  6: 64 x 128,  128, 96 KB
    {2, 8, 4, 2, 4},                    //  7: 128 x 128, 256, 128 KB
    {2, 8, 4, 4, 4},                    //  8: 128 x 256, 512, 192 KB
    {2, 8, 2, 4, 4},                    //  9: 64 x 256,  256, 160 KB
    // Two CTAs of 8 warps per SM for 65 to 256 rows: one CTA's barriers
    // and epilogue overlap the other's loads and products (the sweep also
    // tried 128 x 32, 128 x 64 of 4 warps, 64 x 128, 64 x 256 and 128 x
    // 256 tiles of 2-3 stages: none was needed).
    {2, 8, 4, 2, 3},                    // 10: 128 x 128, 256, 96 KB
    {2, 4, 4, 2, 4},                    // 11: 128 x 64,  256, 96 KB
    // wgmma (sm_90a builds only): warpgroups of 64 weight rows x 64-256 input rows.
    {1, 8, 4, 1, 6, true},              // 12: 64 x 64,   128, 96 KB
    {1, 16, 4, 1, 4, true},             // 13: 64 x 128,  128, 96 KB
    {1, 16, 8, 1, 3, true},             // 14: 128 x 128, 256, 96 KB
    {1, 16, 8, 1, 5, true},             // 15: 128 x 128, 256, 160 KB
    {1, 32, 8, 1, 3, true},             // 16: 128 x 256, 256, 144 KB
    // Wider weight tiles: every CTA reads its input rows from L2 once per
    // k-block, so 256 weight rows per tile read the input a quarter as
    // often as 64.
    {1, 16, 16, 1, 3, true},            // 17: 256 x 128, 512, 144 KB
    {1, 8, 16, 1, 4, true},             // 18: 256 x 64,  512, 160 KB
    {1, 16, 12, 1, 4, true},            // 19: 192 x 128, 384, 160 KB
    // Whole heads of 128 for the RoPE epilogue where the plan has 64-row tiles.
    {1, 8, 8, 1, 4, true},              // 20: 128 x 64,  256, 96 KB
    // TMA producer + wgmma consumers (threads: consumers + the producer warpgroup).
    {1, 16, 8, 1, 5, true, true},       // 21: 128 x 128, 256 + 128, 160 KB
    {1, 16, 16, 1, 4, true, true},      // 22: 256 x 128, 512 + 128, 192 KB
    {1, 8, 8, 1, 6, true, true},        // 23: 128 x 64,  256 + 128, 144 KB
    {1, 16, 4, 1, 8, true, true},       // 24: 64 x 128,  128 + 128, 192 KB
    {1, 8, 4, 1, 10, true, true},       // 25: 64 x 64,   128 + 128, 160 KB
}};
// Tiles 0..11 (mma.sync) are built everywhere, the rest in sm_90a builds only.
inline constexpr int kSkinnyMmaTiles = 12;

// The tiles the rules name (weight rows x input rows).
inline constexpr int kSkinnyMma64x8 = 0, kSkinnyMma64x16 = 1, kSkinnyMma64x32 = 2, kSkinnyMma64x64 = 3;
inline constexpr int kSkinnyMma128x128 = 10, kSkinnyMma128x64 = 11;  // two CTAs an SM
inline constexpr int kSkinnyWgmma64x64 = 12, kSkinnyWgmma64x128 = 13, kSkinnyWgmma128x128 = 14;
inline constexpr int kSkinnyWgmma128x64 = 20;
inline constexpr int kSkinnyTma128x128 = 21, kSkinnyTma128x64 = 23, kSkinnyTma64x128 = 24, kSkinnyTma64x64 = 25;

// The tiles of a build: every tile fits an H100/H200 CTA, and the named
// ones are what their names say.
constexpr bool skinny_tiles_fit() {
  for (const SkinnyTile& t : kSkinnyTiles)
    if (t.threads() > 1024 || t.smem_bytes() > 227 * 1024) return false;
  return true;
}
static_assert(skinny_tiles_fit(), "a skinny tile exceeds a CTA's threads or shared memory");
static_assert(kSkinnyTiles[kSkinnyTma64x64].bn() == 64 && kSkinnyTiles[kSkinnyTma64x64].bm() == 64 &&
                  kSkinnyTiles[kSkinnyTma64x128].bm() == 128 && kSkinnyTiles[kSkinnyTma128x64].bn() == 128 &&
                  kSkinnyTiles[kSkinnyTma128x128].bn() == 128 && kSkinnyTiles[kSkinnyTma128x128].bm() == 128,
              "the named TMA tiles");
static_assert(kSkinnyTiles[kSkinnyWgmma128x64].bn() == 128 && kSkinnyTiles[kSkinnyWgmma128x128].bm() == 128,
              "the RoPE twins of the wgmma tiles");

// A skinny launch: a tile (an index into kSkinnyTiles), the number of K
// splits (1..8: a cluster), and launch options.
struct SkinnyPlan {
  int config = -1;
  int splits = 1;
  bool l2_prefetch = false;  // weight loads ask L2 for 256-byte blocks
  bool pdl = true;           // programmatic dependent launch
  int lookahead = 0;         // > 0: the first (pipeline depth + this) k-blocks of weights
                             // are prefetched into L2 before the dependency wait (0..64)
};

// What a plan needs to know of the GPU and the build.
struct SkinnyGpu {
  int sm_count = 1;
  bool wgmma = false;  // an sm_90a build: tiles from kSkinnyMmaTiles on exist
  // Clusters of `splits` CTAs of tile `config` the GPU runs at once (on CUDA
  // an occupancy query; a cluster's CTAs share one GPC).
  std::function<int64_t(int config, int splits)> resident_clusters;
};

// The tiles a build has.
constexpr int skinny_tile_count(bool wgmma) { return wgmma ? int(kSkinnyTiles.size()) : kSkinnyMmaTiles; }

// k-blocks per split for `splits` requested splits (clamped to 1..k_blocks),
// and the splits that actually run: ceil(k_blocks / that), none empty.
int64_t skinny_k_blocks_per_split(int64_t k_blocks, int64_t splits);
int64_t skinny_splits_run(int64_t k_blocks, int64_t splits);

// Whether the skinny kernel is expected to beat cuBLASLt for M input rows
// of K by segments of rows[i] weight rows each (measured on H100: the rule
// is in the .cpp). The op routes by this and whether the kernel can take
// the tensors (dtypes, alignment).
bool skinny_preferred(int64_t M, int64_t K, std::span<const int64_t> rows, bool wgmma);

// The plan the op uses for that shape on `gpu`.
SkinnyPlan skinny_plan(int64_t M, int64_t K, std::span<const int64_t> rows, const SkinnyGpu& gpu);

// skinny_plan's plan with tiles of whole heads of head_dim and the same K
// splits (so the same bits), for qkv_rope_kv_write's fused epilogue, or
// config -1 when no such tile exists.
SkinnyPlan skinny_rope_plan(int64_t M, int64_t K, std::span<const int64_t> rows, int64_t head_dim,
                            const SkinnyGpu& gpu);

// Whether linear_residual_fold of M rows by an (N, K) weight takes the
// one-wave TMA tiles (64 x 64, 4 K splits), and the fold's plan: those, or
// skinny_plan's.
bool residual_fold_one_wave(int64_t M, int64_t K, int64_t N, const SkinnyGpu& gpu);
SkinnyPlan residual_fold_plan(int64_t M, int64_t K, int64_t N, const SkinnyGpu& gpu);

}  // namespace dapo::ops::plan
