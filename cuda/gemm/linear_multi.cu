// CUDA linear_forward_multi: the decode step's "skinny" products, M (1..256
// running sequences) rows times every weight matrix once, bound by reading
// the bf16 weights. The kernel tiles weight rows finely, puts the tiles of
// every segment (q, k, v or gate, up) in one grid, and splits K over the
// CTAs of a thread-block cluster when the tiles alone cannot fill the GPU.
//
// The product is computed transposed, out^T (N, M) = W (N, K) @ in^T: weight
// rows are the mma's 16-row dimension and input rows its 8-wide one, so a
// small M wastes at most 7 of 8 columns, and both operands are K-contiguous
// (ldmatrix without transposes). Each CTA streams BN weight rows x BM input
// rows through a cp.async pipeline of STAGES k-blocks of 64 into swizzled
// shared memory; warps own 16*MT weight rows x 8*NT input rows (mma.sync
// m16n8k16 bf16 -> fp32). The fp32 tile is staged in shared memory; the S
// CTAs of a cluster (one per K split) then each sum a share of the tile over
// the S staged tiles through distributed shared memory, always in split order
// 0..S-1, add the bias, round once and store. No partials in global memory,
// no second kernel, no atomics: the bits depend on the plan only, which is a
// function of the shape and the GPU's SM count.
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>

#include <cooperative_groups.h>
#include <cuda.h>

#include "common.cuh"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/plan/skinny_gemm_plan.h"
#include "ptx/mma_ptx.cuh"
#include "norm/norm_fold.cuh"
#include "ptx/pdl.cuh"
#include "attention/rope_common.cuh"
#include "runtime/tma_map.h"
#include "ptx/tma_ptx.cuh"
#include "ptx/wgmma_ptx.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/gemm/gemv.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

namespace cg = cooperative_groups;

// The tiles, splits and their rules: ops/plan/skinny_gemm_plan.h.
constexpr int kBK = plan::kSkinnyBK;                // k per pipeline stage: 128 bytes per row
constexpr int kMaxSplits = plan::kSkinnyMaxSplits;  // the portable cluster size

// ---- device helpers ------------------------------------------------------------

// Rows of 128 bytes (8 chunks of 16) with the chunk XORed by row & 7: the 8
// rows of one ldmatrix 8x8 matrix fall in 8 distinct bank groups.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return uint32_t(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// ---- arguments ------------------------------------------------------------------

struct SegmentArgs {
  const bf16_t* weight;
  void* out;
  const void* bias;
  int32_t n;           // weight rows (output features)
  int32_t tile_begin;  // the segment's first weight-row tile in the grid
  int8_t out_f32;
  int8_t bias_kind;    // 0 none, 1 bf16, 2 f32
  int8_t vec_out;      // 4 adjacent outputs of a row go as one store
  int8_t fuse;         // the RoPE + KV-cache epilogue's role: kFuse* below
};

// Roles of a segment under the RoPE + KV-cache epilogue (qkv_rope_kv_write):
// q rotated; k rotated and written to its cache slot; v written to its slot.
constexpr int8_t kFuseNone = 0, kFuseRotate = 1, kFuseRotateCache = 2, kFuseCache = 3;

struct SkinnyArgs {
  SegmentArgs seg[kMaxLinearSegments];
  const bf16_t* in;
  int32_t num_segments, M, K, m_tiles, splits, kb_per_split, k_blocks;
  int32_t lookahead;   // k-blocks past the pipeline's first ones asked of L2 before the wait
  int8_t l2_prefetch;  // weight loads prefetch 256-byte blocks into L2
  // A folded norm of the input rows (norm_fold.h): every output of row m is
  // scaled by its rstd before the bias. rn.ssq null: none.
  RowNormArgs rn;
};

// The kernel's epilogue: the product alone, or (qkv_rope_kv_write) RoPE on
// q and k and the new k and v into the paged cache, with rope_kv_write's
// device code (rope_common.cuh) on the product's rounded bf16 outputs, so
// that the bits are those of the product followed by rope_kv_write.
struct PlainEpilogue {
  static constexpr bool kRope = false, kFold = false;
};
struct RopeEpilogue {
  static constexpr bool kRope = true, kFold = false;
  const int32_t* positions;  // (M) position of each row's token
  const int32_t* slots;      // (M) flat cache slot; outside [0, num_slots): not written (-1 by
                             // contract; others flagged by the v segment's first tile)
  bf16_t* k_cache;           // (num_slots, kv_row)
  bf16_t* v_cache;
  int64_t num_slots;
  int32_t head_dim;  // D: a multiple of 8 dividing the tile's weight rows
  int32_t kv_row;    // Hkv * D elements of one slot
  RopeInvFreq inv_freq;
  DeviceFlags* flags;
};
// linear_residual_fold's epilogue (norm_fold.h), one bias-free segment whose
// out is y: sum = res + the product, y = sum * norm_weight, and each row's
// sum of squares of sum over every 32 columns into ssq (M, parts).
struct FoldEpilogue {
  static constexpr bool kRope = false, kFold = true;
  const bf16_t* res;          // (M, n)
  bf16_t* sum;                // (M, n), may be res
  const bf16_t* norm_weight;  // (n)
  float* ssq;                 // (M, parts)
  int32_t parts;              // ceil(n / 32)
};

// The segment that weight tile `tile` (counted over all segments) lies in:
// its index (the TMA kernel also picks that segment's tensor map) and the
// segment itself, chosen by selects, not an indexed load (the cp.async
// kernel's registers: an indexed load of a.seg took up to 8 more per thread
// in ptxas -v).
[[maybe_unused]] __device__ __forceinline__ int segment_index_of_tile(const SkinnyArgs& a, int tile) {
  int idx = 0;
#pragma unroll
  for (int i = 1; i < kMaxLinearSegments; ++i)
    if (i < a.num_segments && tile >= a.seg[i].tile_begin) idx = i;
  return idx;
}

__device__ __forceinline__ SegmentArgs segment_of_tile(const SkinnyArgs& a, int tile) {
  SegmentArgs s = a.seg[0];
#pragma unroll
  for (int i = 1; i < kMaxLinearSegments; ++i)
    if (i < a.num_segments && tile >= a.seg[i].tile_begin) s = a.seg[i];
  return s;
}
// x[j] += bias[col + j] for j < cnt, in fp32.
__device__ __forceinline__ void add_bias(const SegmentArgs& s, int col, int cnt, float (&x)[4]) {
  if (s.bias_kind == 1) {
    const bf16_t* b = static_cast<const bf16_t*>(s.bias) + col;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < cnt) x[j] += __bfloat162float(b[j]);
  } else if (s.bias_kind == 2) {
    const float* b = static_cast<const float*>(s.bias) + col;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < cnt) x[j] += b[j];
  }
}

// 4 bf16 values to 8-byte aligned memory.
__device__ __forceinline__ void store_bf16x4(bf16_t* o, const float (&x)[4]) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(x[0], x[1]), hi = __floats2bfloat162_rn(x[2], x[3]);
  uint2 v;
  v.x = *reinterpret_cast<const uint32_t*>(&lo);
  v.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(o) = v;
}

// out[row][col + j] = x[j] + bias[col + j] for j < cnt (cnt <= 4), rounded
// once; bf16 outputs also go to also[col + j] where `also` is not null.
__device__ __forceinline__ void store_out(const SegmentArgs& s, int64_t row, int col, int cnt, float (&x)[4],
                                          bf16_t* also = nullptr) {
  add_bias(s, col, cnt, x);
  const int64_t at = row * s.n + col;
  if (s.out_f32) {
    float* o = static_cast<float*>(s.out) + at;
    if (s.vec_out && cnt == 4) {
      *reinterpret_cast<float4*>(o) = make_float4(x[0], x[1], x[2], x[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j < cnt) o[j] = x[j];
    }
  } else {
    bf16_t* o = static_cast<bf16_t*>(s.out) + at;
    if (s.vec_out && cnt == 4) {
      store_bf16x4(o, x);
      if (also != nullptr) store_bf16x4(also + col, x);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j < cnt) {
          o[j] = __float2bfloat16_rn(x[j]);
          if (also != nullptr) also[col + j] = o[j];
        }
    }
  }
}

// ---- the GEMM kernel --------------------------------------------------------------

// A CTA configuration: warps of 16*MT weight rows x 8*NT input rows, WN x WM
// of them, STAGES k-blocks in flight. WGMMA: the products are Hopper's
// warpgroup MMA instead of mma.sync, each warpgroup (4 warps) 64 weight rows
// x all BM input rows (MT 1, WM 1, BM 64, 128 or 256); its accumulators have
// mma.sync's layout per warp, so the epilogue is shared.
// TMA: a producer warpgroup (one thread) asks the copy engine for each
// k-block's weight and input boxes, which complete on a per-stage mbarrier;
// the WN / 4 consumer warpgroups wait on it, multiply (wgmma), and free the
// stage on a second barrier: loads run up to STAGES k-blocks ahead of the
// products, gated by nothing but free stages.
// The sizes and the shared-memory layout come from plan::SkinnyTile, which
// the host's plans read too.
template <int MT_, int NT_, int WN_, int WM_, int STAGES_, bool WGMMA_ = false, bool TMA_ = false>
struct Tile {
  static constexpr plan::SkinnyTile kShape{MT_, NT_, WN_, WM_, STAGES_, WGMMA_, TMA_};
  static constexpr int MT = MT_, NT = NT_, WN = WN_, WM = WM_, STAGES = STAGES_;
  static constexpr bool kWgmma = WGMMA_, kTma = TMA_;
  static constexpr int kConsumerThreads = kShape.consumer_threads();
  static constexpr int kThreads = kShape.threads();
  static constexpr int BN = kShape.bn();  // weight rows per CTA
  static constexpr int BM = kShape.bm();  // input rows per CTA
  static constexpr int kStageBytes = kShape.stage_bytes();
  static constexpr int kLd = kShape.out_ld();  // floats per row of the staged output tile
  // TMA: the full and empty mbarriers of each stage after the pipeline (the
  // output tile reuses the stages, never the barriers).
  static constexpr int kBarrierOffset = kShape.barrier_offset();
  // Each input row's rstd under a folded norm (SkinnyArgs::rn), past
  // everything else: the output tile reuses the stages, never this.
  static constexpr int kRstdOffset = kShape.rstd_offset();
  static constexpr int kSmem = kShape.smem_bytes();
  // Two CTAs of 256 threads per SM when their shared memory allows: the
  // register cap that keeps them resident together (128 a thread).
  static constexpr int kMinBlocks = !kTma && kThreads == 256 && kSmem <= 112 * 1024 ? 2 : 1;
  static_assert(NT == 1 || NT % 2 == 0, "B fragments load two n-blocks at a time");
  static_assert(!kWgmma || (MT == 1 && WM == 1 && WN % 4 == 0 && (BM == 64 || BM == 128 || BM == 256)),
                "a wgmma tile is warpgroups of 64 weight rows x 64, 128 or 256 input rows");
  static_assert(!kTma || (kWgmma && BN <= 256 && BM <= 256), "TMA tiles are wgmma tiles of boxes up to 256 rows");
  // The kernels rely on these two (thread kConsumerThreads loads the boxes).
  static_assert(kThreads == kConsumerThreads + (kTma ? plan::kSkinnyProducerThreads : 0),
                "a TMA tile's producer warpgroup follows its consumers");
  static_assert(!kTma || kRstdOffset >= kBarrierOffset + 16 * STAGES, "the rows' rstd lie past the barriers");
};

template <int ROWS, int THREADS>
__device__ __forceinline__ void load_rows(uint32_t s, const bf16_t* g, int64_t K, int rows_valid, int k0,
                                          const bf16_t* any, int tid, bool prefetch) {
  constexpr int kChunks = ROWS * 8;
#pragma unroll
  for (int i = 0; i < (kChunks + THREADS - 1) / THREADS; ++i) {
    const int c = tid + i * THREADS;
    if (kChunks % THREADS == 0 || c < kChunks) {
      const int r = c >> 3, ch = c & 7;
      const bool ok = r < rows_valid && k0 + ch * 8 < K;
      const bf16_t* src = ok ? g + int64_t(r) * K + k0 + ch * 8 : any;
      if (prefetch) cp_async_16_pf(s + swz(r, ch), src, ok);
      else cp_async_16(s + swz(r, ch), src, ok);
    }
  }
}

// The sums over the cluster's S staged fp32 tiles, in split order, of the
// 4 floats at each of the N offsets `at`. Every remote read is issued before
// the first add, so that their latencies overlap (H100, 0.5B decode step at
// 128 rows: q/k/v 6.9 -> 6.6 us a layer). The epilogue is most of the
// short products' time: without it (a timing build) q/k/v took 2.8 us a
// layer and down 5.7 instead of 8.6. The adds keep split order: the bits
// are unchanged.
template <int N, class Cluster>
__device__ __forceinline__ void sum_splits(const Cluster& cluster, float* tile_s, int S, const int (&at)[N],
                                           float (&x)[N][4]) {
  float4 v[kMaxSplits][N];
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s)
    if (s < S) {
      const float* t = cluster.map_shared_rank(tile_s, s);
#pragma unroll
      for (int n = 0; n < N; ++n) v[s][n] = *reinterpret_cast<const float4*>(t + at[n]);
    }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    x[n][0] = v[0][n].x, x[n][1] = v[0][n].y, x[n][2] = v[0][n].z, x[n][3] = v[0][n].w;
#pragma unroll
    for (int s = 1; s < kMaxSplits; ++s)
      if (s < S) x[n][0] += v[s][n].x, x[n][1] += v[s][n].y, x[n][2] += v[s][n].z, x[n][3] += v[s][n].w;
  }
}

// The cluster barrier before a CTA exits, whose only job is that no CTA
// leaves while another still reads its staged tile: those reads completed
// (their values were summed) before each CTA arrives, so the arrival need
// not wait for this CTA's output stores as sync()'s release would (H100,
// 0.5B decode step at 128 rows: q/k/v 6.6 -> 6.0 us a layer, down 8.5 ->
// 8.0; the step 1.425 -> 1.395 ms).
__device__ __forceinline__ void cluster_sync_before_exit() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// linear_residual_fold's stores (FoldEpilogue): the work items of the plain
// epilogue (4 adjacent outputs of one row, two a thread at a time), where 8
// consecutive lanes hold the 32 columns of one part of one row (BN and the
// grid's strides are multiples of 32 items, so the 8 lanes share the row and
// the trip count); their squares are summed by a fixed shuffle tree.
template <class C, class Cluster>
__device__ __forceinline__ void fold_epilogue(const SkinnyArgs& a, const SegmentArgs& sg, const Cluster& cluster,
                                              float* tile_s, int S, int split, int m0, int n0, int rows, int total,
                                              int stride, const FoldEpilogue& e) {
  static_assert(C::BN % 32 == 0, "a tile holds whole 32-column parts");
  constexpr int kGroups = C::BN / 4;
  const int tid = threadIdx.x, lane = tid & 31;
  const unsigned group = 0xffu << (lane & 24);
  for (int idx = split * C::kThreads + tid; idx < total; idx += 2 * stride) {
    const bool second = idx + stride < total;  // the same for the 8 lanes of a part
    int t[2], f[2], at[2];
    bool ok[2];
    float r[2][4], w[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i = j == 0 || second ? idx + j * stride : idx;
      t[j] = i / kGroups, f[j] = (i % kGroups) * 4;
      ok[j] = (j == 0 || second) && f[j] < rows;
      at[j] = t[j] * C::kLd + f[j];
      // The residual and the norm weight before the sums: their reads overlap.
#pragma unroll
      for (int k = 0; k < 4; ++k) r[j][k] = 0.0f, w[j][k] = 0.0f;
      if (ok[j]) {
        const int64_t at_g = int64_t(m0 + t[j]) * sg.n + n0 + f[j];
        const uint2 rv = *reinterpret_cast<const uint2*>(e.res + at_g);
        const uint2 wv = *reinterpret_cast<const uint2*>(e.norm_weight + n0 + f[j]);
        const __nv_bfloat162* r2 = reinterpret_cast<const __nv_bfloat162*>(&rv);
        const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const float2 rf = __bfloat1622float2(r2[k]), wf = __bfloat1622float2(w2[k]);
          r[j][2 * k] = rf.x, r[j][2 * k + 1] = rf.y, w[j][2 * k] = wf.x, w[j][2 * k + 1] = wf.y;
        }
      }
    }
    float x[2][4];
    sum_splits<2>(cluster, tile_s, S, at, x);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (j == 1 && !second) break;
      float sq = 0.0f;
      if (ok[j]) {
        float s[4], y[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          // The product's bf16 output, then residual_rmsnorm's add, rounded once.
          const float p = __bfloat162float(__float2bfloat16_rn(x[j][k]));
          s[k] = __bfloat162float(__float2bfloat16_rn(r[j][k] + p));
          y[k] = s[k] * w[j][k];
          sq = __fmaf_rn(s[k], s[k], sq);
        }
        const int64_t at_g = int64_t(m0 + t[j]) * sg.n + n0 + f[j];
        store_bf16x4(e.sum + at_g, s);
        store_bf16x4(static_cast<bf16_t*>(sg.out) + at_g, y);
      }
      sq += __shfl_xor_sync(group, sq, 1);
      sq += __shfl_xor_sync(group, sq, 2);
      sq += __shfl_xor_sync(group, sq, 4);
      const int part_first = f[j] - 4 * (lane & 7);
      if ((lane & 7) == 0 && part_first < rows) e.ssq[int64_t(m0 + t[j]) * e.parts + (n0 + part_first) / 32] = sq;
    }
  }
}

// The output tile from every CTA's accumulators (those of threads with
// `holds`): staged in shared memory as fp32, then each CTA of the cluster
// sums a share of it over the S staged tiles, in split order, and stores it
// through the epilogue E (bias, rounding once, RoPE and cache writes).
// kNorm: the rows may be under a folded norm (a.rn); false compiles that
// code out.
template <class C, class E, bool kNorm>
__device__ __forceinline__ void split_k_epilogue(const SkinnyArgs& a, const SegmentArgs& sg,
                                                 const float (&acc)[C::MT][C::NT][4], unsigned char* smem, bool holds,
                                                 int split, int m0, int n0, int rows, int toks, const E& e) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wn = warp % C::WN, wm = warp / C::WN;
  // C fragment: c0, c1 = (weight row lane/4, input rows 2(lane%4), +1), c2, c3 = weight row + 8.
  float* tile_s = reinterpret_cast<float*>(smem);
  if (holds) {
#pragma unroll
    for (int mi = 0; mi < C::MT; ++mi)
#pragma unroll
      for (int ni = 0; ni < C::NT; ++ni) {
        const int f = wn * C::MT * 16 + mi * 16 + (lane >> 2);
        const int t = wm * C::NT * 8 + ni * 8 + 2 * (lane & 3);
        tile_s[t * C::kLd + f] = acc[mi][ni][0];
        tile_s[(t + 1) * C::kLd + f] = acc[mi][ni][1];
        tile_s[t * C::kLd + f + 8] = acc[mi][ni][2];
        tile_s[(t + 1) * C::kLd + f + 8] = acc[mi][ni][3];
      }
  }
  // The rows' rstd under a folded norm: the TMA kernel's idle producer
  // threads computed them during the products; here, the other kernel's.
  float* rstd_s = reinterpret_cast<float*>(smem + C::kRstdOffset);
  const bool scaled = kNorm && a.rn.ssq != nullptr;
  if constexpr (!C::kTma) {
    if (scaled)
      for (int t = tid; t < toks; t += C::kThreads) rstd_s[t] = row_rstd(a.rn, m0 + t);
  }
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every split's tile is staged

  // This CTA's share of the output tile: groups of 4 adjacent outputs, dealt
  // round-robin over the cluster; each is the sum of the S staged tiles in
  // split order.
  const int S = a.splits;
  if constexpr (E::kRope) {
    if (sg.fuse == kFuseRotate || sg.fuse == kFuseRotateCache) {
      // Rotated segments: work items of 4 pairs (i, i + D/2) of one head of
      // one row; the tile holds whole heads (D divides BN and the segment).
      const int D = e.head_dim, half = D / 2, per_head = half / 4, items = (C::BN / D) * per_head;
      for (int idx = split * C::kThreads + tid; idx < toks * items; idx += S * C::kThreads) {
        const int t = idx / items, r = idx % items;
        const int i0 = (r % per_head) * 4, f1 = (r / per_head) * D + i0, f2 = f1 + half;
        if (f1 >= rows) continue;
        const int64_t m = m0 + t;
        // The row's metadata before the sums, so that its reads overlap theirs.
        const int32_t position = e.positions[m];
        const int64_t slot = sg.fuse == kFuseRotateCache ? int64_t(e.slots[m]) : int64_t(-1);
        float x[2][4];
        sum_splits<2>(cluster, tile_s, S, {t * C::kLd + f1, t * C::kLd + f2}, x);
        float(&x1)[4] = x[0];
        float(&x2)[4] = x[1];
        if (scaled) {
          const float rs = rstd_s[t];
#pragma unroll
          for (int k = 0; k < 4; ++k) x1[k] *= rs, x2[k] *= rs;
        }
        add_bias(sg, n0 + f1, 4, x1);
        add_bias(sg, n0 + f2, 4, x2);
        float c[4], sn[4];
        rope_angles<4>(position, e.inv_freq, i0, 1.0f, c, sn);
        float y1[4], y2[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          // The product's bf16 output, then rope_rotate_heads' arithmetic.
          const float p = __bfloat162float(__float2bfloat16_rn(x1[k]));
          const float q = __bfloat162float(__float2bfloat16_rn(x2[k]));
          y1[k] = __fadd_rn(__fmul_rn(p, c[k]), __fmul_rn(-q, sn[k]));
          y2[k] = __fadd_rn(__fmul_rn(q, c[k]), __fmul_rn(p, sn[k]));
        }
        bf16_t* o = static_cast<bf16_t*>(sg.out) + m * sg.n + n0;
        store_bf16x4(o + f1, y1);
        store_bf16x4(o + f2, y2);
        if (sg.fuse == kFuseRotateCache) {
          if (slot >= 0 && slot < e.num_slots) {
            bf16_t* kc = e.k_cache + slot * e.kv_row + n0;
            store_bf16x4(kc + f1, y1);
            store_bf16x4(kc + f2, y2);
          }
        }
      }
      cluster_sync_before_exit();
      return;
    }
  }
  // Two groups a thread at a time, their remote reads in flight together.
  constexpr int kGroups = C::BN / 4;
  const int total = toks * kGroups, stride = S * C::kThreads;
  if constexpr (E::kFold) {
    fold_epilogue<C>(a, sg, cluster, tile_s, S, split, m0, n0, rows, total, stride, e);
  } else {
    for (int idx = split * C::kThreads + tid; idx < total; idx += 2 * stride) {
      int t[2], f[2], at[2];
      bool ok[2];
      bf16_t* also[2] = {nullptr, nullptr};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const bool in_range = j == 0 || idx + stride < total;
        const int i = in_range ? idx + j * stride : idx;  // out of range: a duplicate read, not stored
        t[j] = i / kGroups, f[j] = (i % kGroups) * 4;
        ok[j] = in_range && f[j] < rows;
        at[j] = t[j] * C::kLd + f[j];
        if constexpr (E::kRope) {
          if (ok[j] && sg.fuse == kFuseCache) {
            const int64_t slot = e.slots[m0 + t[j]];
            if (slot >= 0 && slot < e.num_slots) also[j] = e.v_cache + slot * e.kv_row;
            else if (slot != -1 && n0 == 0 && f[j] == 0) flag_bad_id(e.flags, FlagSite::kv_slot, m0 + t[j], slot);
          }
        }
      }
      float x[2][4];
      sum_splits<2>(cluster, tile_s, S, at, x);
      if (scaled) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float rs = rstd_s[t[j]];
#pragma unroll
          for (int k = 0; k < 4; ++k) x[j][k] *= rs;
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (ok[j]) store_out(sg, int64_t(m0 + t[j]), n0 + f[j], min(4, rows - f[j]), x[j], also[j]);
    }
  }
  cluster_sync_before_exit();
}

template <class C, class E>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    skinny_gemm_kernel(const __grid_constant__ SkinnyArgs a, const __grid_constant__ E e) {
  // 1024-byte aligned: the hardware's 128-byte swizzle (wgmma) keys on address bits 7-9.
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wn = warp % C::WN, wm = warp / C::WN;
  // The splits of one output tile are consecutive CTAs: one cluster. The
  // m-tiles that share a weight tile follow each other, so the later ones
  // read it from L2.
  int bid = int(blockIdx.x);
  const int split = bid % a.splits;
  bid /= a.splits;
  const int mt = bid % a.m_tiles, tile = bid / a.m_tiles;
  const SegmentArgs sg = segment_of_tile(a, tile);
  const int n0 = (tile - sg.tile_begin) * C::BN, rows = min(C::BN, sg.n - n0);
  const int m0 = mt * C::BM, toks = min(C::BM, a.M - m0);
  const int kb0 = split * a.kb_per_split, nkb = min(a.k_blocks - kb0, a.kb_per_split);
  const int64_t K = a.K;
  const bf16_t* wg = sg.weight + int64_t(n0) * K;
  const bf16_t* xg = a.in + int64_t(m0) * K;
  // The weights do not come from the previous kernel: ask L2 for this
  // CTA's first k-blocks (what the pipeline loads first, and `lookahead`
  // more) before griddepcontrol.wait, so that their fetch overlaps that
  // kernel's drain. A hint only: no weight byte reaches this CTA before the
  // wait. (Prefetching ahead of the pipeline all along, 128 bytes a row per
  // k-block, cost up to 30% on large matrices on an H100: not done.)
  if (a.lookahead > 0) {
    const int kb_hi = min(nkb, C::STAGES - 1 + a.lookahead);
    const int k_lo = kb0 * kBK, k_hi = min(a.K, (kb0 + kb_hi) * kBK);
    if (k_hi > k_lo)
      for (int r = tid; r < rows; r += C::kThreads)
        prefetch_l2_bulk(wg + int64_t(r) * K + k_lo, uint32_t(k_hi - k_lo) * 2u);
  }
  // Programmatic dependent launch: this CTA may start while the previous
  // kernel drains; nothing is read before that kernel's writes are visible.
  pdl_wait();
  // Every CTA of this grid is resident once all have passed here, so the
  // next kernel (when launched as a programmatic dependent) may take the
  // SMs' spare room now: its own L2 prefetches overlap this kernel's tail,
  // and its griddepcontrol.wait still waits for this grid to finish.
  pdl_launch_dependents();

  auto load_stage = [&](int slot, int kb) {
    const uint32_t sw = sbase + uint32_t(slot * C::kStageBytes);
    load_rows<C::BN, C::kThreads>(sw, wg, K, rows, kb * kBK, a.in, tid, a.l2_prefetch);
    load_rows<C::BM, C::kThreads>(sw + C::BN * 128, xg, K, toks, kb * kBK, a.in, tid, false);
  };

  float acc[C::MT][C::NT][4];
#pragma unroll
  for (int mi = 0; mi < C::MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::NT; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.0f;

#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < nkb) load_stage(s, kb0 + s);
    cp_async_commit();
  }
  // A warp whose input rows all lie past M has nothing to multiply.
  const bool active = wm * C::NT * 8 < toks;
  for (int i = 0; i < nkb; ++i) {
    cp_async_wait<C::STAGES - 2>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (C::kWgmma) fence_proxy_async_smem();  // this thread's cp.async bytes, for wgmma's reads
#endif
    __syncthreads();  // stage i landed for all; stage i - 1's slot is free again
    const int pre = i + C::STAGES - 1;
    if (pre < nkb) load_stage(pre % C::STAGES, kb0 + pre);
    cp_async_commit();
    const uint32_t sw = sbase + uint32_t((i % C::STAGES) * C::kStageBytes), sx = sw + C::BN * 128;
    if constexpr (C::kWgmma) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      // The warpgroup's 64 weight rows times every input row of the tile,
      // 16 of K per instruction; waited for before the next barrier, after
      // which this stage's slot is refilled.
      const uint32_t sa = sw + uint32_t((warp >> 2) * 64 * 128);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks)
        wgmma_m64k16<C::BM>(acc[0], wgmma_desc_sw128(sa + ks * 32), wgmma_desc_sw128(sx + ks * 32));
      wgmma_commit();
      wgmma_wait<0>();
#else
      __trap();  // not an sm_90a build: the host plans no wgmma configuration
#endif
    } else if (active) {
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks) {
        uint32_t af[C::MT][4];
#pragma unroll
        for (int mi = 0; mi < C::MT; ++mi)
          ldsm_x4(af[mi], sw + swz(wn * C::MT * 16 + mi * 16 + (lane & 15), ks * 2 + (lane >> 4)));
        uint32_t bfr[C::NT][2];
        if constexpr (C::NT == 1) {
          uint32_t r[2];
          ldsm_x2(r, sx + swz(wm * 8 + (lane & 7), ks * 2 + ((lane >> 3) & 1)));
          bfr[0][0] = r[0];
          bfr[0][1] = r[1];
        } else {
#pragma unroll
          for (int nj = 0; nj < C::NT / 2; ++nj) {
            uint32_t r[4];
            ldsm_x4(r, sx + swz(wm * C::NT * 8 + nj * 16 + (lane & 7) + ((lane >> 4) << 3),
                                ks * 2 + ((lane >> 3) & 1)));
            bfr[2 * nj][0] = r[0];
            bfr[2 * nj][1] = r[1];
            bfr[2 * nj + 1][0] = r[2];
            bfr[2 * nj + 1][1] = r[3];
          }
        }
#pragma unroll
        for (int mi = 0; mi < C::MT; ++mi)
#pragma unroll
          for (int ni = 0; ni < C::NT; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the output tile

  split_k_epilogue<C, E, true>(a, sg, acc, smem, active, split, m0, n0, rows, toks, e);
}

// The TMA variant's boxes: one map per segment's weight (N_i rows x K) and
// one for the input (M rows x K), 64 of K by the tile's rows each, in the
// 128-byte swizzle the wgmma descriptors read. Out-of-range rows and K come
// in as zeros.
struct TmaMaps {
  CUtensorMap weight[kMaxLinearSegments];
  CUtensorMap in;
};

// kNorm: a separate instantiation for rows under a folded norm. Compiled
// into every tile, the RowNorm code (never run without one) took the 1.5B
// down_proj tile from 122 to 165 registers and its decode step's products
// from 392 to 401 us (H100).
template <class C, class E, bool kNorm>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    skinny_tma_kernel(const __grid_constant__ SkinnyArgs a, const __grid_constant__ TmaMaps maps,
                      const __grid_constant__ E e) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x, warp = tid >> 5;
  int bid = int(blockIdx.x);
  const int split = bid % a.splits;
  bid /= a.splits;
  const int mt = bid % a.m_tiles, tile = bid / a.m_tiles;
  const int seg = segment_index_of_tile(a, tile);
  const SegmentArgs sg = a.seg[seg];
  const int n0 = (tile - sg.tile_begin) * C::BN, rows = min(C::BN, sg.n - n0);
  const int m0 = mt * C::BM, toks = min(C::BM, a.M - m0);
  const int kb0 = split * a.kb_per_split, nkb = min(a.k_blocks - kb0, a.kb_per_split);
  const uint32_t full = sbase + C::kBarrierOffset, empty = full + 8 * C::STAGES;
  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, C::WN / 4);  // one arrival per consumer warpgroup
    }
    mbar_init_fence();
  }
  __syncthreads();
  // Programmatic dependent launch: the input comes from the previous kernel.
  pdl_wait();
  pdl_launch_dependents();

  float acc[C::MT][C::NT][4];
#pragma unroll
  for (int ni = 0; ni < C::NT; ++ni)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[0][ni][j] = 0.0f;

  if (warp >= C::WN) {
    // Producer: one thread, every k-block of this CTA's split, as soon as
    // its stage is free (the consumers released its previous use).
    if (tid == C::kConsumerThreads) {
      for (int i = 0; i < nkb; ++i) {
        const int slot = i % C::STAGES;
        if (i >= C::STAGES) mbar_wait(empty + 8 * slot, uint32_t((i / C::STAGES - 1) & 1));
        const uint32_t sw = sbase + uint32_t(slot * C::kStageBytes), bar = full + 8 * slot;
        mbar_arrive_expect_tx(bar, uint32_t(C::kStageBytes));
        const int k = (kb0 + i) * kBK;
        tma_load_2d(sw, &maps.weight[seg], k, n0, bar);
        tma_load_2d(sw + C::BN * 128, &maps.in, k, m0, bar);
      }
    } else if (kNorm && a.rn.ssq != nullptr && warp > C::WN) {
      // The other producer warps: the rows' rstd under a folded norm while
      // the products run (the epilogue reads them after the barrier below).
      float* rstd_s = reinterpret_cast<float*>(smem + C::kRstdOffset);
      constexpr int kRstdThreads = plan::kSkinnyProducerThreads - 32;  // all but the loading warp
      for (int t = tid - C::kConsumerThreads - 32; t < toks; t += kRstdThreads)
        rstd_s[t] = row_rstd(a.rn, m0 + t);
    }
  } else {
    // Consumers: warpgroup g multiplies weight rows 64g.. of the tile by every
    // input row; a stage is released once the products that read it are done
    // (one k-block of products stays in flight).
    const uint32_t a_off = uint32_t((warp >> 2) * 64 * 128);
    for (int i = 0; i < nkb; ++i) {
      const int slot = i % C::STAGES;
      mbar_wait(full + 8 * slot, uint32_t((i / C::STAGES) & 1));
      const uint32_t sw = sbase + uint32_t(slot * C::kStageBytes), sx = sw + C::BN * 128;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks)
        wgmma_m64k16<C::BM>(acc[0], wgmma_desc_sw128(sw + a_off + ks * 32), wgmma_desc_sw128(sx + ks * 32));
      wgmma_commit();
      wgmma_wait<1>();
      if (i > 0 && (tid & 127) == 0) mbar_arrive(empty + 8 * ((i - 1) % C::STAGES));
    }
    wgmma_wait<0>();
  }
  // Every box issued has landed (the consumers waited for each) and every
  // product has read its stage: the stages become the output tile.
  __syncthreads();
  split_k_epilogue<C, E, kNorm>(a, sg, acc, smem, warp < C::WN, split, m0, n0, rows, toks, e);
#else
  __trap();  // not an sm_90a build: the host plans no TMA configuration
#endif
}

// The kernel of configuration C, for the occupancy queries.
template <class C>
const void* kernel_of() {
  if constexpr (C::kTma) return reinterpret_cast<const void*>(skinny_tma_kernel<C, PlainEpilogue, false>);
  else return reinterpret_cast<const void*>(skinny_gemm_kernel<C, PlainEpilogue>);
}

// ---- configurations --------------------------------------------------------------

// One kernel per entry of plan::kSkinnyTiles, the table the plans index
// (SkinnyPlan::config); the wgmma and TMA tiles only in an sm_90a build.
#if defined(DAPO_CUDA_WGMMA)
constexpr bool kWgmmaBuilt = true;
#else
constexpr bool kWgmmaBuilt = false;
#endif
constexpr int kConfigs = plan::skinny_tile_count(kWgmmaBuilt);

template <int ID>
struct ConfigOf {
  static constexpr plan::SkinnyTile t = plan::kSkinnyTiles[ID];
  using type = Tile<t.mt, t.nt, t.wn, t.wm, t.stages, t.wgmma, t.tma>;
};

// f(the Tile of configuration id).
template <int ID = 0, class F>
void with_config(int id, F&& f) {
  if constexpr (ID < kConfigs) {
    if (id == ID) return f(typename ConfigOf<ID>::type{});
    return with_config<ID + 1>(id, f);
  } else {
    DAPO_FAIL("skinny GEMM: no configuration ", id);
  }
}

// The tile of a configuration this build has.
const plan::SkinnyTile& tile_of(int id) {
  DAPO_CHECK(id >= 0 && id < kConfigs, "skinny GEMM: no configuration ", id);
  return plan::kSkinnyTiles[size_t(id)];
}

// CTAs of configuration `id` one SM holds at once (also raises the kernel's
// shared-memory limit, which the launch needs anyway).
int ctas_per_sm(int id) {
  int per_sm = 0;
  with_config(id, [&](auto t) {
    using C = decltype(t);
    const void* kernel = kernel_of<C>();
    DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    DAPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, C::kThreads, C::kSmem));
  });
  return std::max(per_sm, 1);
}

// Clusters of `splits` CTAs of configuration `id` the GPU runs at once. A
// cluster's CTAs share one GPC, so this is less than the CTA slots over
// `splits` by up to a cluster per GPC; if the runtime cannot say, an
// estimate from GPCs of 16 SMs.
int64_t resident_clusters(int id, int splits) {
  int clusters = 0;
  bool known = false;
  with_config(id, [&](auto t) {
    using C = decltype(t);
    const void* kernel = kernel_of<C>();
    DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(splits);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(unsigned(splits));
    config.blockDim = dim3(C::kThreads);
    config.dynamicSmemBytes = C::kSmem;
    config.attrs = &attr;
    config.numAttrs = 1;
    known = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess;
    if (!known) (void)cudaGetLastError();  // not sticky; clears the last-error slot
  });
  if (known) return clusters;
  return int64_t(sm_count() / 16) * ((16 * ctas_per_sm(id)) / splits);
}

int64_t total_cols(std::span<const LinearSegment> segs) {
  int64_t n = 0;
  for (const LinearSegment& s : segs) n += s.weight.shape[0];
  return n;
}

// The weight rows of each segment, as the plans take them.
struct SegmentRows {
  std::array<int64_t, kMaxLinearSegments> n{};
  size_t count = 0;
  std::span<const int64_t> span() const { return {n.data(), count}; }
};
SegmentRows segment_rows(std::span<const LinearSegment> segs) {
  DAPO_CHECK(segs.size() <= size_t(kMaxLinearSegments), "linear_forward_multi: ", segs.size(),
             " segments, expected 1 to ", kMaxLinearSegments);
  SegmentRows r;
  for (const LinearSegment& s : segs) r.n[r.count++] = s.weight.shape[0];
  return r;
}

// ---- host checks -------------------------------------------------------------------

// The checks of the entry points below that tests, tuning and other ops
// call past ops::linear_forward_multi: where the tensors live, then the
// op's contract (src/ops/linear_multi.cpp).
void check_entry(const Ctx& ctx, const Tensor& in, std::span<const LinearSegment> segs) {
  check_device(ctx, in, "in");
  for (const LinearSegment& s : segs) {
    check_device(ctx, s.out, "out");
    check_device(ctx, s.weight, "weight");
    if (s.bias.defined()) check_device(ctx, s.bias, "bias");
  }
  ops::detail::check_linear_forward_multi("linear_forward_multi", in, segs);
}

// The cuBLASLt path over checked arguments: a strided batch for each run of
// segments that allows one, one call for each other segment; returns the
// number of groups run.
int cublaslt_groups(const Ctx& ctx, const Tensor& in, std::span<const LinearSegment> segs) {
  int groups = 0;
  for (size_t i = 0; i < segs.size(); ++groups) {
    const int batched = detail::linear_forward_cublaslt_batched(ctx, in, segs.subspan(i));
    if (batched > 0) {
      i += size_t(batched);
    } else {
      const LinearSegment& s = segs[i++];
      detail::linear_forward_cublaslt(ctx, s.out, in, s.weight, s.bias);
    }
  }
  return groups;
}

// One launch of the kernel over checked arguments with plan p and epilogue
// E; under RopeEpilogue, segments 0, 1, 2 are q, k, v of
// qkv_rope_kv_write's epilogue.
template <class E>
void run_skinny(const Ctx& ctx, const Tensor& in, std::span<const LinearSegment> segments, const detail::SkinnyPlan& p,
                const E& epilogue, const RowNorm* rn) {
  const int64_t M = in.shape[0], K = in.shape[1];
  DAPO_CHECK(p.config >= 0 && p.config < kConfigs && p.splits >= 1 && p.splits <= kMaxSplits, "skinny plan: config ",
             p.config, " splits ", p.splits);
  const plan::SkinnyTile& c = tile_of(p.config);

  SkinnyArgs a{};
  int64_t tiles = 0;
  int n_seg = 0;
  for (const LinearSegment& s : segments) {
    const int64_t N = s.weight.shape[0];
    if (N == 0) continue;  // nothing to write
    SegmentArgs& g = a.seg[n_seg++];
    g.weight = static_cast<const bf16_t*>(s.weight.data);
    g.out = s.out.data;
    g.bias = s.bias.defined() ? s.bias.data : nullptr;
    g.n = int32_t(N);
    g.tile_begin = int32_t(tiles);
    g.out_f32 = s.out.dtype == DType::f32;
    g.bias_kind = !s.bias.defined() ? 0 : s.bias.dtype == DType::bf16 ? 1 : 2;
    const uintptr_t align = g.out_f32 ? 16 : 8;
    g.vec_out = N % 4 == 0 && reinterpret_cast<uintptr_t>(s.out.data) % align == 0;
    g.fuse = !E::kRope ? kFuseNone : n_seg == 1 ? kFuseRotate : n_seg == 2 ? kFuseRotateCache : kFuseCache;
    tiles += ceil_div(N, c.bn());
  }
  if (n_seg == 0) return;
  const int64_t k_blocks = ceil_div(K, kBK), per_split = plan::skinny_k_blocks_per_split(k_blocks, p.splits);
  const int64_t splits = ceil_div(k_blocks, per_split), m_tiles = ceil_div(M, c.bm());
  const int64_t grid = tiles * splits * m_tiles;
  DAPO_CHECK(grid <= INT32_MAX, "linear_forward_multi: a grid of ", grid, " CTAs");
  a.in = static_cast<const bf16_t*>(in.data);
  a.num_segments = n_seg;
  a.M = int32_t(M);
  a.K = int32_t(K);
  a.m_tiles = int32_t(m_tiles);
  a.splits = int32_t(splits);
  a.kb_per_split = int32_t(per_split);
  a.k_blocks = int32_t(k_blocks);
  a.l2_prefetch = p.l2_prefetch;
  a.lookahead = int32_t(std::clamp(p.lookahead, 0, 64));
  a.rn = row_norm_args(ctx, rn, M, K, "linear_forward_multi");

  auto launch = [&](auto kernel, auto t, const auto&... args) {
    using C = decltype(t);
    DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    cudaLaunchAttribute attrs[2];
    attrs[0].id = cudaLaunchAttributeClusterDimension;  // the splits of a tile: one cluster
    attrs[0].val.clusterDim.x = unsigned(splits);
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(unsigned(grid));
    config.blockDim = dim3(C::kThreads);
    config.dynamicSmemBytes = C::kSmem;
    config.stream = stream_of(ctx);
    config.attrs = attrs;
    config.numAttrs = p.pdl ? 2 : 1;
    DAPO_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a, args...));
  };
  with_config(p.config, [&](auto t) {
    using C = decltype(t);
    if constexpr (C::kTma) {
      TmaMaps maps{};
      for (int i = 0; i < n_seg; ++i) maps.weight[i] = tma_box_map_bf16(a.seg[i].weight, a.seg[i].n, K, C::BN);
      maps.in = tma_box_map_bf16(a.in, M, K, C::BM);
      if (a.rn.ssq == nullptr) {
        launch(skinny_tma_kernel<C, E, false>, t, maps, epilogue);
      } else if constexpr (!E::kFold) {
        launch(skinny_tma_kernel<C, E, true>, t, maps, epilogue);
      } else {
        DAPO_FAIL("linear_residual_fold: its input rows take no folded norm");
      }
    } else {
      launch(skinny_gemm_kernel<C, E>, t, epilogue);
    }
  });
}

}  // namespace

namespace detail {

plan::SkinnyGpu skinny_gpu() {
  plan::SkinnyGpu g;
  g.sm_count = sm_count();
  g.wgmma = kWgmmaBuilt;
  g.resident_clusters = resident_clusters;  // asked of the runtime when a rule needs it
  return g;
}

int skinny_config_count() { return kConfigs; }

void skinny_config_tile(int config, int& rows_n, int& rows_m) {
  const plan::SkinnyTile& c = tile_of(config);
  rows_n = c.bn();
  rows_m = c.bm();
}

bool linear_multi_skinny_supported(const Tensor& in, std::span<const LinearSegment> segs) {
  if (segs.empty() || segs.size() > size_t(kMaxLinearSegments)) return false;
  if (in.dtype != DType::bf16 || in.ndim != 2) return false;
  const int64_t M = in.shape[0], K = in.shape[1];
  // 16-byte cp.async chunks of every row: K % 8 == 0 and 16-byte aligned bases.
  if (K < 1 || K % 8 != 0 || K > INT32_MAX || M > INT32_MAX || !aligned16(in.data)) return false;
  for (const LinearSegment& s : segs) {
    if (s.weight.dtype != DType::bf16 || !aligned16(s.weight.data)) return false;
    if (s.out.dtype != DType::bf16 && s.out.dtype != DType::f32) return false;
    if (s.bias.defined() && s.bias.dtype != DType::bf16 && s.bias.dtype != DType::f32) return false;
  }
  return total_cols(segs) < (int64_t(1) << 30);
}

bool linear_forward_few_rows(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segs) {
  // Batch-invariant: cuBLASLt's one algorithm for every row count
  // (gemm_plan_cache.cuh), never the kernels for few rows.
  if (ctx.batch_invariant) return false;
  const int64_t M = in.shape[0], K = in.shape[1];
  if (gemv_supported(in, segs) && gemv_preferred(M, K, segs)) {
    linear_forward_multi_gemv(ctx, in, segs);
    return true;
  }
  if (linear_multi_skinny_supported(in, segs) && linear_multi_skinny_preferred(M, K, segs)) {
    linear_forward_multi_skinny(ctx, in, segs, nullptr);
    return true;
  }
  return false;
}

bool linear_multi_skinny_preferred(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  return plan::skinny_preferred(M, K, segment_rows(segs).span(), kWgmmaBuilt);
}

SkinnyPlan skinny_plan(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  return plan::skinny_plan(M, K, segment_rows(segs).span(), skinny_gpu());
}

void linear_forward_multi_skinny(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments,
                                 const SkinnyPlan* plan, const RowNorm* rn) {
  check_entry(ctx, in, segments);
  DAPO_CHECK(linear_multi_skinny_supported(in, segments), "linear_forward_multi: the skinny kernel cannot take in ",
             in.shape_string(), " (", dtype_name(in.dtype), ")");
  const int64_t M = in.shape[0], K = in.shape[1];
  if (M == 0) return;
  run_skinny(ctx, in, segments, plan != nullptr ? *plan : skinny_plan(M, K, segments), PlainEpilogue{}, rn);
}

SkinnyPlan skinny_rope_plan(int64_t M, int64_t K, std::span<const LinearSegment> segments, int64_t head_dim) {
  return plan::skinny_rope_plan(M, K, segment_rows(segments).span(), head_dim, skinny_gpu());
}

void linear_forward_multi_skinny_rope(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                                      Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta,
                                      const SkinnyPlan& plan, const RowNorm* rn) {
  check_entry(ctx, in, qkv);
  DAPO_CHECK(qkv.size() == 3 && linear_multi_skinny_supported(in, qkv),
             "linear_forward_multi_skinny_rope: the skinny kernel cannot take in ", in.shape_string());
  const int64_t M = in.shape[0], D = k_cache.shape[3];
  const bool whole_heads = plan.config >= 0 && plan.config < kConfigs && tile_of(plan.config).bn() % D == 0;
  DAPO_CHECK(whole_heads, "linear_forward_multi_skinny_rope: tiles of ",
             plan.config >= 0 && plan.config < kConfigs ? tile_of(plan.config).bn() : 0,
             " weight rows do not hold whole heads of ", D);
  for (const LinearSegment& s : qkv)
    DAPO_CHECK(s.out.dtype == DType::bf16 && s.weight.shape[0] > 0 && s.weight.shape[0] % D == 0 &&
                   reinterpret_cast<uintptr_t>(s.out.data) % 8 == 0,
               "linear_forward_multi_skinny_rope: q, k and v must be non-empty bf16 rows of whole heads, 8-byte "
               "aligned");
  if (M == 0) return;
  RopeEpilogue e{};
  e.positions = positions.ptr<int32_t>();
  e.slots = slot_mapping.ptr<int32_t>();
  e.k_cache = static_cast<bf16_t*>(k_cache.data);
  e.v_cache = static_cast<bf16_t*>(v_cache.data);
  e.num_slots = k_cache.shape[0] * k_cache.shape[1];
  e.head_dim = int32_t(D);
  e.kv_row = int32_t(k_cache.shape[2] * D);
  e.inv_freq = rope_inv_freq(theta, D);
  e.flags = ctx.flags;
  run_skinny(ctx, in, qkv, plan, e, rn);
}

bool linear_residual_fold_one_wave(int64_t M, int64_t K, int64_t N) {
  return plan::residual_fold_one_wave(M, K, N, skinny_gpu());
}

bool linear_residual_fold_supported(const Tensor& y, const Tensor& in, const Tensor& weight) {
  const LinearSegment seg[] = {{y, weight, Tensor{}}};
  // Stores of 4 adjacent bf16 outputs: rows of a multiple of 4, 8-byte aligned.
  return y.dtype == DType::bf16 && y.ndim == 2 && y.shape[1] % 4 == 0 && reinterpret_cast<uintptr_t>(y.data) % 8 == 0 &&
         linear_multi_skinny_supported(in, seg);
}

void linear_residual_fold_skinny(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight,
                                 Tensor res, Tensor norm_weight, const SkinnyPlan* plan) {
  const LinearSegment seg[] = {{y, weight, Tensor{}}};
  check_entry(ctx, in, seg);
  DAPO_CHECK(linear_residual_fold_supported(y, in, weight), "linear_residual_fold: the skinny kernel cannot take in ",
             in.shape_string(), " and y ", y.shape_string());
  for (const auto& [t, name] : {std::pair{&sum, "sum"}, {&res, "res"}, {&norm_weight, "norm_weight"}}) {
    check_device(ctx, *t, name);
    DAPO_CHECK(t->dtype == DType::bf16 && reinterpret_cast<uintptr_t>(t->data) % 8 == 0, "linear_residual_fold: ",
               name, " must be 8-byte aligned bf16");
  }
  check_device(ctx, ssq, "ssq");
  const int64_t M = in.shape[0], K = in.shape[1], N = weight.shape[0];
  if (M == 0 || N == 0) return;
  FoldEpilogue e{};
  e.res = static_cast<const bf16_t*>(res.data);
  e.sum = static_cast<bf16_t*>(sum.data);
  e.norm_weight = static_cast<const bf16_t*>(norm_weight.data);
  e.ssq = ssq.ptr<float>();
  e.parts = int32_t(norm_fold_parts(N));
  run_skinny(ctx, in, seg, plan != nullptr ? *plan : ops::plan::residual_fold_plan(M, K, N, skinny_gpu()), e, nullptr);
}

int linear_forward_multi_cublaslt(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  check_entry(ctx, in, segments);
  return cublaslt_groups(ctx, in, segments);
}

}  // namespace detail

// The contract is checked by ops::linear_forward_multi; the kernel's own
// limits (dtypes, K % 8, alignment) decide between it and cuBLASLt.
void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  const int64_t M = in.shape[0];
  // No rows, or no weight rows in any segment: no product (the planner has
  // no tile for a product of no columns).
  const bool no_columns = std::all_of(segments.begin(), segments.end(),
                                      [](const LinearSegment& s) { return s.weight.shape[0] == 0; });
  if (M == 0 || no_columns) return;
  if (!detail::linear_forward_few_rows(ctx, in, segments)) cublaslt_groups(ctx, in, segments);
}

}  // namespace dapo::ops::cuda
