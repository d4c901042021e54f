// CUDA lm_head_sample (include/dapo/ops/lm_head_sample.h): the LM head's
// products folded into per-part softmax statistics by their epilogue, then
// one CTA a sampled row to draw from them.
//
// lm_head_parts_kernel is persistent (one CTA an SM): CTA i takes the work
// items i, i + grid, ... (an item: BN = 128 or 192 weight rows x BM = 64 or
// 128 input rows, all of K). One producer thread streams every item's
// k-blocks of weight and input boxes through a TMA pipeline, running ahead
// across items, so that the next item's loads overlap this item's epilogue;
// BN / 64 consumer warpgroups multiply (wgmma, 64 weight rows each, fp32
// accumulators) and fold their accumulators in registers: each warp's 16
// weight rows are one part, each thread holds two of them for its columns
// (input rows), and a reduce-scatter over the 8 lanes that share those
// columns (shuffles xor 16, 8, 4, halving the columns each time) leaves each
// lane with the whole parts' (max z, sum of exp(z - max)) of an eighth of
// them, which it stores; the warps' parts of each column, merged in warp
// order through shared memory, are the tile's summary. No logits reach
// memory; only the parts, (B, P) float2 with P = ceil(V / 16), 1/8 of the
// f32 logits' bytes, and the summaries, 1/8 or 1/12 of that.
//
// lm_head_walk_kernel: one CTA per sampled row stages its row's tile
// summaries in shared memory, takes the max, the masses rescaled to it
// (float exp, summed in double, each thread over a contiguous range in
// order, then a block scan in thread order), the tile where the cumulative
// mass first exceeds u * total, then the part inside it from the tile's
// parts, and recomputes that part's logits (16 threads an id: fp32 dot
// products of the bf16 rows in a fixed order) to walk them in id order.
// (Reading all the parts instead, 76 KB a row at 0.5B, took the walk 16 us
// of a decode step on an H100.)
#include <cuda.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "common.cuh"
#include "dapo/core/arena.h"
#include "dapo/core/rng.h"
#include "dapo/ops/lm_head_sample.h"
#include "ptx/mma_ptx.cuh"
#include "norm/norm_fold.cuh"
#include "ptx/pdl.cuh"
#include "runtime/tma_map.h"
#include "ptx/tma_ptx.cuh"
#include "ptx/wgmma_ptx.cuh"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

constexpr int kBK = 64;  // k per pipeline stage: 128 bytes of every row
// Input rows under a folded norm (norm_fold.h) whose rstd the head kernel
// keeps in shared memory: the decode step's rows (the fold's own bound is 128).
constexpr int kMaxNormRows = 256;
constexpr int kPart = int(kLmHeadPart);
static_assert(kPart == 16, "a part is one warp's 16 weight rows of the wgmma tile");

// A tile of BN weight rows (BN / 64 consumer warpgroups of 64) x BM input
// rows, and as many stages as fit in 200 KB (at most 8).
template <int BN_, int BM_>
struct HeadTile {
  static constexpr int BN = BN_, BM = BM_, NT = BM / 8;
  static constexpr int kConsumerGroups = BN / 64;
  static constexpr int kConsumerThreads = 128 * kConsumerGroups;
  static constexpr int kThreads = kConsumerThreads + 128;  // + a producer warpgroup
  static constexpr int kStageBytes = (BN + BM) * kBK * 2;
  static constexpr int STAGES = (200 * 1024) / kStageBytes < 8 ? (200 * 1024) / kStageBytes : 8;
  static constexpr int kBarrierOffset = STAGES * kStageBytes;  // a multiple of 1024
  static constexpr int kRstdOffset = kBarrierOffset + 16 * STAGES;  // kMaxNormRows floats
  // Each consumer warp's part of every column, for the tile's summary: two
  // buffers, a tile's and the next one's.
  static constexpr int kPairsBytes = (kConsumerThreads / 32) * BM * 8;
  static constexpr int kPairsOffset = kRstdOffset + 4 * kMaxNormRows;
  static constexpr int kSmem = kPairsOffset + 2 * kPairsBytes;
  static_assert(kSmem <= 227 * 1024, "an H100 CTA has at most 227 KB of shared memory");
  static_assert(BN % 64 == 0 && BN <= 256, "warpgroups of 64 weight rows, boxes of at most 256");
  static_assert(BM == 64 || BM == 128, "wgmma tiles of 64 or 128 input rows");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// (m1, s1) and (m2, s2), each a max and a sum of exp(z - max), as one pair.
// A NaN max or sum stays NaN in the sum (fmaxf drops NaN: the exp does
// not); two empty pairs (max -inf) give an empty pair, not NaN.
__device__ __forceinline__ void merge(float m1, float s1, float m2, float s2, float& m, float& s) {
  m = fmaxf(m1, m2);
  const float t = __fadd_rn(__fmul_rn(s1, expf(__fsub_rn(m1, m))), __fmul_rn(s2, expf(__fsub_rn(m2, m))));
  s = m == -INFINITY ? 0.0f : t;
}

// One level of the reduce-scatter across lanes `x` apart: the lower lane
// keeps the first H pairs (merged with its partner's first H), the upper
// lane the last H; the lower lane's pair comes first in every merge.
template <int H, int Q>
__device__ __forceinline__ void fold_level(float (&m)[Q], float (&s)[Q], int x) {
  const bool up = (threadIdx.x & x) != 0;
#pragma unroll
  for (int i = 0; i < H; ++i) {
    const float km = up ? m[i + H] : m[i], ks = up ? s[i + H] : s[i];
    const float gm = up ? m[i] : m[i + H], gs = up ? s[i] : s[i + H];
    const float rm = __shfl_xor_sync(0xffffffffu, gm, x), rs = __shfl_xor_sync(0xffffffffu, gs, x);
    if (up) merge(rm, rs, km, ks, m[i], s[i]);
    else merge(km, ks, rm, rs, m[i], s[i]);
  }
}

// A consumer warp's epilogue: its 16 weight rows [n0 + 16 warp, + 16) are
// part n0 / 16 + warp of every column (input row) m0 + c of the tile. The
// wgmma accumulators hold, per thread, rows lane/4 and lane/4 + 8 of those
// 16 at columns 8 ni + 2 (lane % 4) + e. rstd (null: none): each input
// row's folded-norm scale, applied to its logits before the temperature.
// Every warp's pairs also go to pairs_s (warps, BM), for the tile summary.
template <class C>
__device__ __forceinline__ void fold_parts(const float (&acc)[C::NT][4], float2* __restrict__ parts, int n0, int m0,
                                           int M, int V, int P, int stride, float inv_t, const float* rstd,
                                           float2* pairs_s) {
  constexpr int Q = 2 * C::NT;  // (max, sum) pairs a lane holds before the reduce-scatter
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const int row = n0 + 16 * warp + (lane >> 2);
  const bool lo_ok = row < V, hi_ok = row + 8 < V;
  float m[Q], s[Q];
#pragma unroll
  for (int ni = 0; ni < C::NT; ++ni)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float xl = acc[ni][e], xh = acc[ni][2 + e];
      if (rstd != nullptr) {
        const float rs = rstd[min(m0 + 8 * ni + 2 * (lane & 3) + e, M - 1)];
        xl = __fmul_rn(xl, rs), xh = __fmul_rn(xh, rs);
      }
      const float zl = __fmul_rn(xl, inv_t), zh = __fmul_rn(xh, inv_t);
      float mm = lo_ok ? zl : -INFINITY;
      if (hi_ok) mm = fmaxf(mm, zh);
      const float t = __fadd_rn(lo_ok ? expf(__fsub_rn(zl, mm)) : 0.0f, hi_ok ? expf(__fsub_rn(zh, mm)) : 0.0f);
      m[2 * ni + e] = mm;  // a NaN logit makes the sum NaN (fmaxf drops it from the max)
      s[2 * ni + e] = mm == -INFINITY ? 0.0f : t;
    }
  fold_level<Q / 2>(m, s, 16);
  fold_level<Q / 4>(m, s, 8);
  fold_level<Q / 8>(m, s, 4);
  const int part = n0 / kPart + warp;
#pragma unroll
  for (int i = 0; i < Q / 8; ++i) {
    const int q = i + (Q / 8) * (lane >> 2);
    const int c = 8 * (q >> 1) + 2 * (lane & 3) + (q & 1);
    pairs_s[warp * C::BM + c] = make_float2(m[i], s[i]);  // past V: (-inf, 0)
    if (part < P && m0 + c < M) parts[int64_t(m0 + c) * stride + part] = make_float2(m[i], s[i]);
  }
}

// The tile's summary of every column: its warps' pairs merged in warp (=
// id) order, into summaries (M, sstride) at column `tile`, after a barrier
// of the consumer threads (every warp's pairs are in). The pairs alternate
// between two buffers, so that the other threads go on to the next tile
// while these merge: a buffer is written again two tiles later, past the
// next tile's barrier, which the merging threads reach only when done.
template <class C>
__device__ __forceinline__ void summarize_tile(const float2* pairs_s, float2* __restrict__ summaries, int tile, int m0,
                                               int M, int sstride) {
  constexpr int kWarps = C::kConsumerThreads / 32;
  named_barrier_sync(2, C::kConsumerThreads);
  const int c = int(threadIdx.x);
  if (c < C::BM && m0 + c < M) {
    float m = pairs_s[c].x, s = pairs_s[c].y;
#pragma unroll
    for (int w = 1; w < kWarps; ++w) merge(m, s, pairs_s[w * C::BM + c].x, pairs_s[w * C::BM + c].y, m, s);
    summaries[int64_t(m0 + c) * sstride + tile] = make_float2(m, s);
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    lm_head_parts_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap imap,
                         float2* __restrict__ parts, float2* __restrict__ summaries, int32_t M, int32_t V, int32_t P,
                         int32_t stride, int32_t sstride, int32_t k_blocks, int32_t m_tiles, int32_t items, float inv_t,
                         const __grid_constant__ RowNormArgs rn) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t sbase = smem_u32(smem);
  const int tid = int(threadIdx.x), warp = tid >> 5;
  const uint32_t full = sbase + C::kBarrierOffset, empty = full + 8 * C::STAGES;
  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, C::kConsumerGroups);  // one arrival per consumer warpgroup
    }
    mbar_init_fence();
  }
  __syncthreads();
  // Programmatic dependent launch: the input rows come from the previous kernel.
  pdl_wait();
  pdl_launch_dependents();

  // Under a folded norm the producer warpgroup's other three warps compute
  // every input row's rstd while the first products run; the consumers wait
  // for them (named barrier 1) before their first epilogue.
  float* rstd_s = reinterpret_cast<float*>(smem + C::kRstdOffset);
  const bool norm = rn.ssq != nullptr;
  constexpr int kNormBarrierThreads = C::kConsumerThreads + 96;
  if (warp >= C::kConsumerThreads / 32) {
    if (norm && warp > C::kConsumerThreads / 32) {
      for (int m = tid - C::kConsumerThreads - 32; m < M; m += 96) rstd_s[m] = row_rstd(rn, m);
      named_barrier_arrive(1, kNormBarrierThreads);
    }
    // Producer: one thread, every item's k-blocks in order, each as soon as
    // its slot is free; it runs into the next item while the consumers fold.
    if (tid == C::kConsumerThreads) {
      int it = 0;
      for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
        const int n0 = (item / m_tiles) * C::BN, m0 = (item % m_tiles) * C::BM;
        for (int kb = 0; kb < k_blocks; ++kb, ++it) {
          const int slot = it % C::STAGES;
          if (it >= C::STAGES) mbar_wait(empty + 8 * slot, uint32_t((it / C::STAGES - 1) & 1));
          const uint32_t sw = sbase + uint32_t(slot * C::kStageBytes), bar = full + 8 * slot;
          mbar_arrive_expect_tx(bar, uint32_t(C::kStageBytes));
          tma_load_2d(sw, &wmap, kb * kBK, n0, bar);
          tma_load_2d(sw + C::BN * 128, &imap, kb * kBK, m0, bar);
        }
      }
    }
    return;
  }
  // Consumers: warpgroup g multiplies weight rows 64 g.. of the item by
  // every input row; a slot is released once the products that read it are
  // done (one k-block of products stays in flight), the item's last one
  // before the epilogue.
  const uint32_t a_off = uint32_t((warp >> 2) * 64 * 128);
  int it = 0;
  for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
    const int n0 = (item / m_tiles) * C::BN, m0 = (item % m_tiles) * C::BM;
    float acc[C::NT][4];
#pragma unroll
    for (int ni = 0; ni < C::NT; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[ni][j] = 0.0f;
    for (int kb = 0; kb < k_blocks; ++kb, ++it) {
      const int slot = it % C::STAGES;
      mbar_wait(full + 8 * slot, uint32_t((it / C::STAGES) & 1));
      const uint32_t sw = sbase + uint32_t(slot * C::kStageBytes), sx = sw + C::BN * 128;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks)
        wgmma_m64k16<C::BM>(acc, wgmma_desc_sw128(sw + a_off + ks * 32), wgmma_desc_sw128(sx + ks * 32));
      wgmma_commit();
      wgmma_wait<1>();
      if (kb > 0 && (tid & 127) == 0) mbar_arrive(empty + 8 * ((it - 1) % C::STAGES));
    }
    wgmma_wait<0>();
    if ((tid & 127) == 0) mbar_arrive(empty + 8 * ((it - 1) % C::STAGES));
    if (norm && it == k_blocks) named_barrier_sync(1, kNormBarrierThreads);  // before the first epilogue
    float2* pairs_s = reinterpret_cast<float2*>(smem + C::kPairsOffset + ((it / k_blocks) & 1) * C::kPairsBytes);
    fold_parts<C>(acc, parts, n0, m0, M, V, P, stride, inv_t, norm ? rstd_s : nullptr, pairs_s);
    summarize_tile<C>(pairs_s, summaries, item / m_tiles, m0, M, sstride);
  }
#else
  __trap();  // not an sm_90a build: the host launches it only where lm_head_sample_built()
#endif
}

// ---- the draw: one CTA a sampled row ------------------------------------------

constexpr int kWalkThreads = 256, kWalkWarps = kWalkThreads / 32;

struct WalkSmem {
  float warp_max[kWalkWarps];
  double warp_sum[kWalkWarps];
  float z[kPart];
  int32_t first_tile;      // the first tile whose inclusive cumulative mass exceeds the target
  int32_t last_tile;       // the last tile with a mass > 0
  int32_t start_part;      // the part the walk starts in
  double before;           // the mass before that tile, then before that part
  float tile_mass[kPart];  // the chosen tile's parts' masses (at most 16 parts)
  int32_t chosen;
  float rstd;  // the row's folded-norm scale (1 without one)
};

__device__ float block_max(float v, WalkSmem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) sm.warp_max[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = sm.warp_max[0];
  for (int w = 1; w < kWalkWarps; ++w) m = fmaxf(m, sm.warp_max[w]);
  __syncthreads();  // warp_max may be written again
  return m;
}

// The exclusive prefix of v over the threads in thread order, and the total.
__device__ double block_exclusive_scan(double v, WalkSmem& sm, double& total) {
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  double inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double u = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += u;
  }
  if (lane == 31) sm.warp_sum[warp] = inc;
  __syncthreads();
  double before = 0;
  total = 0;
  for (int w = 0; w < kWalkWarps; ++w) {
    if (w == warp) before = total;
    total += sm.warp_sum[w];
  }
  __syncthreads();
  return before + (inc - v);
}

// A part's mass rescaled to the row max mx.
__device__ __forceinline__ float part_mass(float2 ms, float mx) { return __fmul_rn(ms.y, expf(__fsub_rn(ms.x, mx))); }

// The logits of ids [v0, v0 + 16) clipped to V, times inv_t, into sm.z:
// 16 threads an id (a half-warp), each summing 8 of K at a time over every
// 16th chunk in order (up to 4 chunks' loads in flight), then a fixed
// shuffle tree over the half-warp.
__device__ void part_logits(const bf16_t* __restrict__ h, const bf16_t* __restrict__ weight, int32_t v0, int32_t V,
                            int32_t C, float inv_t, float rstd, WalkSmem& sm) {
  const int j = int(threadIdx.x >> 4), l = int(threadIdx.x & 15);
  const int32_t v = min(v0 + j, V - 1);  // past V: computed, never walked
  const uint4* a = reinterpret_cast<const uint4*>(h);
  const uint4* b = reinterpret_cast<const uint4*>(weight + int64_t(v) * C);
  const int chunks = C / 8;
  float dot = 0.0f;
  for (int c0 = l; c0 < chunks; c0 += 4 * 16) {
    uint4 x[4], y[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int c = c0 + 16 * u;
      x[u] = c < chunks ? __ldg(a + c) : make_uint4(0, 0, 0, 0);
      y[u] = c < chunks ? __ldg(b + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x[u]);
      const __nv_bfloat162* y2 = reinterpret_cast<const __nv_bfloat162*>(&y[u]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 xf = __bfloat1622float2(x2[k]), yf = __bfloat1622float2(y2[k]);
        dot = __fmaf_rn(xf.x, yf.x, dot);
        dot = __fmaf_rn(xf.y, yf.y, dot);
      }
    }
  }
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, o));
  if (l == 0) sm.z[j] = __fmul_rn(__fmul_rn(dot, rstd), inv_t);
}

// Passes over a thread's contiguous range of tile summaries, kUnroll at a
// time: the loads and exps of a group are independent (in flight
// together), the double sums stay in tile order.
constexpr int kUnroll = 8;

__global__ void __launch_bounds__(kWalkThreads)
    lm_head_walk_kernel(int32_t* __restrict__ tokens, float* __restrict__ logprobs, const float2* __restrict__ parts,
                        int32_t P, int32_t stride, const float2* __restrict__ summaries, int32_t tiles,
                        int32_t sstride, int32_t parts_per_tile, const bf16_t* __restrict__ hidden,
                        const bf16_t* __restrict__ weight, int64_t B, int32_t V, int32_t C,
                        const int32_t* __restrict__ logit_rows, const int64_t* __restrict__ streams,
                        const int64_t* __restrict__ counters, uint64_t seed, float inv_t,
                        const __grid_constant__ RowNormArgs rn, DeviceFlags* flags) {
  static_assert(kWalkThreads == 16 * kPart, "part_logits: a half-warp an id");
  __shared__ WalkSmem sm;
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  const int t = int(threadIdx.x);
  int64_t lr = r;
  if (logit_rows != nullptr) {
    lr = logit_rows[r];
    if (lr < 0 || lr >= B) {
      if (t == 0) {
        flag_bad_id(flags, FlagSite::sampling, r, lr);
        tokens[r] = 0;
        logprobs[r] = NAN;
      }
      return;
    }
  }
  // Level 1: the row's tile summaries (a tile's parts merged), into shared
  // memory (the launch gave `sstride` of them), two a 16-byte load (a row
  // starts 16-byte aligned: sstride is even), kUnroll loads a thread in
  // flight. The passes below find the tile; level 2 the part inside it.
  const float2* row = summaries + lr * sstride;
  {
    extern __shared__ float4 stiles[];
    const float4* src = reinterpret_cast<const float4*>(row);
    const int32_t n4 = (tiles + 1) / 2;
    for (int32_t q0 = t; q0 < n4; q0 += kUnroll * kWalkThreads) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t q = q0 + u * kWalkThreads;
        v[u] = q < n4 ? src[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (q0 + u * kWalkThreads < n4) stiles[q0 + u * kWalkThreads] = v[u];
    }
    __syncthreads();
    row = reinterpret_cast<const float2*>(stiles);
  }

  // The max, in any order: every thread over every 256th tile.
  float local_max = -INFINITY;
  for (int32_t q0 = t; q0 < tiles; q0 += kUnroll * kWalkThreads) {
    float m[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t q = q0 + u * kWalkThreads;
      m[u] = q < tiles ? row[q].x : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) local_max = fmaxf(local_max, m[u]);
  }
  const float mx = block_max(local_max, sm);

  // The masses, each thread over a contiguous range in order, then the
  // block's exclusive scan in thread order.
  const int32_t chunk = (tiles + kWalkThreads - 1) / kWalkThreads;
  const int32_t p0 = min(t * chunk, tiles), p1 = min(p0 + chunk, tiles);
  double sum = 0;
  for (int32_t q0 = p0; q0 < p1; q0 += kUnroll) {
    float w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w[u] = q0 + u < p1 ? part_mass(row[q0 + u], mx) : 0.0f;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (q0 + u < p1) sum += double(w[u]);
  }
  double total;
  const double before = block_exclusive_scan(sum, sm, total);
  if (!(isfinite(total) && total > 0)) {
    if (t == 0) {
      flag_non_finite(flags, FlagSite::sampling, r);
      tokens[r] = 0;
      logprobs[r] = NAN;
    }
    return;
  }
  const U32x4 d = philox_draw(seed, uint64_t(streams[r]), uint64_t(counters[r]));
  const double target = double(uniform_float(d.v[0])) * total;

  // The first tile whose cumulative mass exceeds the target (the same sums
  // in the same order as above). Only a range whose end exceeds it can hold
  // that tile (before + x grows with x), so the others skip the search.
  if (t == 0) {
    sm.first_tile = INT_MAX;
    sm.last_tile = -1;
    sm.before = 0;
  }
  __syncthreads();
  int32_t first = -1;
  double first_before = 0;
  if (before + sum > target) {
    double local = 0;
    for (int32_t q0 = p0; q0 < p1 && first < 0; q0 += kUnroll) {
      float w[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) w[u] = q0 + u < p1 ? part_mass(row[q0 + u], mx) : 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (q0 + u >= p1 || first >= 0) continue;
        if (before + (local + double(w[u])) > target) first = q0 + u, first_before = before + local;
        local += double(w[u]);
      }
    }
  }
  if (first >= 0) atomicMin(&sm.first_tile, first);
  __syncthreads();
  const bool reached = sm.first_tile != INT_MAX;
  if (!reached) {
    // Rounding left every tile short of the target: the walk starts in the
    // last tile with a mass > 0 (rare: u within rounding of 1).
    int32_t last = -1;
    double last_before = 0, local = 0;
    for (int32_t q = p0; q < p1; ++q) {
      const float w = part_mass(row[q], mx);
      if (w > 0.0f) last = q, last_before = before + local;
      local += double(w);
    }
    if (last >= 0) atomicMax(&sm.last_tile, last);
    __syncthreads();
    if (last >= 0 && last == sm.last_tile) sm.before = last_before;
  } else if (first == sm.first_tile) {
    sm.before = first_before;
  }
  const int32_t tile = reached ? sm.first_tile : max(sm.last_tile, 0);
  __syncthreads();

  // Level 2: the tile's parts (16 ids each) in id order from the mass before
  // the tile; the first whose cumulative mass exceeds the target, or, if
  // rounding leaves them short, the last with a mass > 0 (the walk below
  // goes on into the next parts when its own sums end short).
  if (t < 32) {
    const int32_t q0 = tile * parts_per_tile, n = min(parts_per_tile, P - q0);
    if (t < n) sm.tile_mass[t] = part_mass(parts[lr * stride + q0 + t], mx);
    __syncwarp();
    if (t == 0) {
      double cum = sm.before, last_before = sm.before;
      int32_t part = -1, last = q0;
      for (int j = 0; j < n; ++j) {
        const float w = sm.tile_mass[j];
        if (w > 0.0f) last = q0 + j, last_before = cum;
        if (cum + double(w) > target) {
          part = q0 + j;
          break;
        }
        cum += double(w);
      }
      sm.start_part = part >= 0 ? part : last;
      sm.before = part >= 0 ? cum : last_before;
      // The row's scale for the recomputed logits under a folded norm.
      sm.rstd = rn.ssq != nullptr ? row_rstd(rn, int(lr)) : 1.0f;
    }
  }
  __syncthreads();
  const int32_t start = sm.start_part;

  // The walk from that part, its logits recomputed, in id order (scaled by
  // the row's rstd under a folded norm, as the head kernel scaled them).
  const float rstd = sm.rstd;
  const bf16_t* h = hidden + lr * C;
  double cum = sm.before;
  int32_t chosen = -1, last_id = -1;
  float dz_chosen = 0.0f, dz_last = 0.0f;
  for (int32_t p = start; p < P; ++p) {
    part_logits(h, weight, p * kPart, V, C, inv_t, rstd, sm);
    __syncthreads();
    if (t == 0) {
      for (int j = 0; j < kPart && p * kPart + j < V; ++j) {
        const float dz = __fsub_rn(sm.z[j], mx);
        const float w = expf(dz);
        if (w > 0.0f) last_id = p * kPart + j, dz_last = dz;
        cum += double(w);
        if (cum > target) {
          chosen = p * kPart + j, dz_chosen = dz;
          break;
        }
      }
      sm.chosen = chosen;
    }
    __syncthreads();
    if (sm.chosen >= 0) break;
  }
  if (t == 0) {
    if (chosen < 0) {
      // Rounding left even the row's end short: the last id with w > 0 (the
      // start part has one whenever its mass is > 0).
      chosen = last_id >= 0 ? last_id : start * kPart;
      dz_chosen = last_id >= 0 ? dz_last : __fsub_rn(sm.z[0], mx);
    }
    tokens[r] = chosen;
    logprobs[r] = float(double(dz_chosen) - log(total));
  }
}

// Where the head kernel writes: (B, stride) parts and (B, sstride) tile
// summaries.
struct PartsOut {
  float2* parts;
  float2* summaries;
  int64_t P, stride, sstride;
};

template <int BN, int BM>
void launch_parts(const Ctx& ctx, const Tensor& hidden, const Tensor& weight, const PartsOut& out, float inv_t,
                  const RowNormArgs& rn) {
  using C = HeadTile<BN, BM>;
  const int64_t B = hidden.shape[0], K = hidden.shape[1], V = weight.shape[0];
  const int64_t m_tiles = ceil_div(B, int64_t(BM)), items = ceil_div(V, int64_t(C::BN)) * m_tiles;
  DAPO_CHECK(items <= INT32_MAX, "lm_head_sample: ", items, " tiles");
  const CUtensorMap wmap = tma_box_map_bf16(weight.data, V, K, C::BN);
  const CUtensorMap imap = tma_box_map_bf16(hidden.data, B, K, BM);
  auto kernel = lm_head_parts_kernel<C>;
  DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
  const unsigned grid = unsigned(std::min<int64_t>(items, sm_count()));
  DAPO_CUDA_CHECK(launch_pdl(kernel, dim3(grid), dim3(C::kThreads), size_t(C::kSmem), stream_of(ctx), wmap, imap,
                             out.parts, out.summaries, int32_t(B), int32_t(V), int32_t(out.P), int32_t(out.stride),
                             int32_t(out.sstride), int32_t(ceil_div(K, int64_t(kBK))), int32_t(m_tiles),
                             int32_t(items), inv_t, rn));
}

// Weight rows per item: of 128 and 192, the one whose items spread over the
// SMs with the fewest weight rows on the busiest SM, the wider on a tie (its
// input boxes, re-read from L2 for every item, are fewer per weight byte).
// Qwen2.5's V = 151,936 on 132 SMs: 1,187 items of 128 (9 waves) or 792 of
// 192 (6 waves), 1,152 rows either way: 192.
int head_tile_rows(int64_t V, int64_t m_tiles) {
  int best = 0;
  int64_t best_rows = 0;
  for (const int bn : {128, 192}) {
    const int64_t waves = ceil_div(ceil_div(V, bn) * m_tiles, sm_count()), rows = waves * bn;
    if (best == 0 || rows <= best_rows) best = bn, best_rows = rows;
  }
  return best;
}

// The walk kernel's shared memory for a row's tile summaries (Qwen2.5: 792).
constexpr int64_t kMaxStagedTiles = 24576;  // 192 KB
static_assert(kLmHeadMaxVocabCuda <= kMaxStagedTiles * 128, "every tile of at least 128 ids staged");

}  // namespace

namespace detail {
bool lm_head_sample_built() {
#if defined(DAPO_CUDA_WGMMA)
  return true;
#else
  return false;
#endif
}
}  // namespace detail

void lm_head_sample(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor hidden, Tensor weight, Tensor logit_rows,
                    Tensor rng_streams, Tensor rng_counters, const SamplingParams& p, const RowNorm& norm) {
  // The contract is checked by ops::lm_head_sample; these are the kernels' own limits.
  const int64_t R = tokens.numel();
  const bool rows = has_logit_rows(logit_rows);
  DAPO_CHECK(detail::lm_head_sample_built(), "lm_head_sample: this build has no sm_90a kernels");
  DAPO_CHECK(hidden.dtype == DType::bf16, "lm_head_sample: CUDA takes bf16 hidden and weight, got ",
             dtype_name(hidden.dtype));
  const int64_t B = hidden.shape[0], C = hidden.shape[1], V = weight.shape[0];
  DAPO_CHECK(C % 8 == 0 && C <= INT32_MAX && B <= INT32_MAX && aligned16(hidden.data) && aligned16(weight.data),
             "lm_head_sample: C = ", C, " must be a multiple of 8 and both tensors 16-byte aligned");
  DAPO_CHECK(V <= kLmHeadMaxVocabCuda, "lm_head_sample: a vocabulary of ", V, " (CUDA: at most ",
             kLmHeadMaxVocabCuda, ")");
  const RowNormArgs rn = row_norm_args(ctx, &norm, B, C, "lm_head_sample");
  DAPO_CHECK(rn.ssq == nullptr || B <= kMaxNormRows, "lm_head_sample: a folded norm over ", B, " rows (at most ",
             kMaxNormRows, ")");
  if (R == 0) return;
  const int64_t P = ceil_div(V, int64_t(kPart));
  DAPO_CHECK(ctx.scratch != nullptr &&
                 ctx.scratch->capacity() - ctx.scratch->used() >= lm_head_sample_scratch_bytes(B, V),
             "lm_head_sample needs ", lm_head_sample_scratch_bytes(B, V), " bytes of ctx.scratch");
  ArenaScope scope(*ctx.scratch);
  // 64 input rows a tile up to 64 rows, else 128 (more rows: more m-tiles;
  // 256-row tiles took 246 us for 256 rows of 0.5B's head on an H100,
  // against 232 for cuBLASLt's head and the sampler).
  const int64_t bm = B <= 64 ? 64 : 128;
  const int bn = B > 0 ? head_tile_rows(V, ceil_div(B, bm)) : 128;
  // (B, stride) and (B, sstride) float2: rows of P parts and of the tiles'
  // summaries, 16-byte aligned (strides even).
  const int64_t tiles = ceil_div(V, int64_t(bn)), stride = (P + 1) / 2 * 2, sstride = (tiles + 1) / 2 * 2;
  const size_t rows_alloc = size_t(std::max<int64_t>(B, 1));
  float2* parts = reinterpret_cast<float2*>(ctx.scratch->alloc_array<float>(rows_alloc * size_t(stride) * 2));
  float2* summaries = reinterpret_cast<float2*>(ctx.scratch->alloc_array<float>(rows_alloc * size_t(sstride) * 2));
  const float inv_t = 1.0f / p.temperature;  // the CPU op's z = logit * inv_t
  if (B > 0) {
    const PartsOut out{parts, summaries, P, stride, sstride};
    if (bm == 64) {
      if (bn == 192) launch_parts<192, 64>(ctx, hidden, weight, out, inv_t, rn);
      else launch_parts<128, 64>(ctx, hidden, weight, out, inv_t, rn);
    } else {
      if (bn == 192) launch_parts<192, 128>(ctx, hidden, weight, out, inv_t, rn);
      else launch_parts<128, 128>(ctx, hidden, weight, out, inv_t, rn);
    }
  }
  const size_t staged = size_t(sstride) * sizeof(float2);
  DAPO_CUDA_CHECK(
      cudaFuncSetAttribute(lm_head_walk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(staged)));
  DAPO_CUDA_CHECK(launch_pdl(lm_head_walk_kernel, dim3(unsigned(R)), dim3(kWalkThreads), staged, stream_of(ctx),
                             tokens.ptr<int32_t>(), logprobs.ptr<float>(), static_cast<const float2*>(parts),
                             int32_t(P), int32_t(stride), static_cast<const float2*>(summaries), int32_t(tiles),
                             int32_t(sstride), int32_t(bn / kPart), static_cast<const bf16_t*>(hidden.data),
                             static_cast<const bf16_t*>(weight.data), B, int32_t(V), int32_t(C),
                             rows ? logit_rows.ptr<int32_t>() : static_cast<const int32_t*>(nullptr),
                             rng_streams.ptr<int64_t>(), rng_counters.ptr<int64_t>(), p.seed, inv_t, rn,
                             ctx.flags));
}

}  // namespace dapo::ops::cuda
