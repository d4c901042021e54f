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
#include <cstdint>

#include <cooperative_groups.h>
#include <cuda.h>

#include "common.cuh"
#include "dapo/ops/linear_multi.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "ptx/mma_ptx.cuh"
#include "norm/norm_fold.cuh"
#include "ptx/pdl.cuh"
#include "attention/rope_common.cuh"
#include "runtime/tma_map.h"
#include "ptx/tma_ptx.cuh"
#include "ptx/wgmma_ptx.cuh"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;
using bf16_t = __nv_bfloat16;

namespace cg = cooperative_groups;

constexpr int kBK = 64;            // k per pipeline stage: 128 bytes per row
constexpr int kMaxSplits = 8;      // the portable cluster size
constexpr int kMinKBlocksPerSplit = 2;

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
  const int32_t* slots;      // (M) flat cache slot; outside [0, num_slots): not written
  bf16_t* k_cache;           // (num_slots, kv_row)
  bf16_t* v_cache;
  int64_t num_slots;
  int32_t head_dim;  // D: a multiple of 8 dividing the tile's weight rows
  int32_t kv_row;    // Hkv * D elements of one slot
  RopeInvFreq inv_freq;
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
template <int MT_, int NT_, int WN_, int WM_, int STAGES_, bool WGMMA_ = false, bool TMA_ = false>
struct Tile {
  static constexpr int MT = MT_, NT = NT_, WN = WN_, WM = WM_, STAGES = STAGES_;
  static constexpr bool kWgmma = WGMMA_, kTma = TMA_;
  static constexpr int kConsumerThreads = 32 * WN * WM;
  static constexpr int kThreads = kConsumerThreads + (kTma ? 128 : 0);
  static constexpr int BN = 16 * MT * WN;  // weight rows per CTA
  static constexpr int BM = 8 * NT * WM;   // input rows per CTA
  static constexpr int kStageBytes = (BN + BM) * kBK * 2;
  static constexpr int kLd = BN + 4;       // floats per row of the staged output tile
  static constexpr int kPipeSmem = STAGES * kStageBytes > BM * kLd * 4 ? STAGES * kStageBytes : BM * kLd * 4;
  // TMA: the full and empty mbarriers of each stage after the pipeline (the
  // output tile reuses the stages, never the barriers).
  static constexpr int kBarrierOffset = (kPipeSmem + 1023) / 1024 * 1024;
  // Each input row's rstd under a folded norm (SkinnyArgs::rn), past
  // everything else: the output tile reuses the stages, never this.
  static constexpr int kRstdOffset = ((kTma ? kBarrierOffset + 16 * STAGES : kPipeSmem) + 15) / 16 * 16;
  static constexpr int kSmem = kRstdOffset + BM * 4;
  // Two CTAs of 256 threads per SM when their shared memory allows: the
  // register cap that keeps them resident together (128 a thread).
  static constexpr int kMinBlocks = !kTma && kThreads == 256 && kSmem <= 112 * 1024 ? 2 : 1;
  static_assert(NT == 1 || NT % 2 == 0, "B fragments load two n-blocks at a time");
  static_assert(!kWgmma || (MT == 1 && WM == 1 && WN % 4 == 0 && (BM == 64 || BM == 128 || BM == 256)),
                "a wgmma tile is warpgroups of 64 weight rows x 64, 128 or 256 input rows");
  static_assert(!kTma || (kWgmma && BN <= 256 && BM <= 256), "TMA tiles are wgmma tiles of boxes up to 256 rows");
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
      for (int t = tid - C::kConsumerThreads - 32; t < toks; t += 96)
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

// The table the plans index (SkinnyPlan::config). Few input rows need little
// arithmetic, so their CTAs are small and deep (many k-blocks of weights in
// flight per SM); many rows need the larger warp tiles.
//                     MT NT WN WM STAGES   BN x BM,   threads, shared memory
using Cfg0 = Tile<1, 1, 4, 1, 8>;  // 64 x 8,    128, 72 KB
using Cfg1 = Tile<1, 2, 4, 1, 8>;  // 64 x 16,   128, 80 KB
using Cfg2 = Tile<1, 4, 4, 1, 8>;  // 64 x 32,   128, 96 KB
using Cfg3 = Tile<1, 8, 4, 1, 6>;  // 64 x 64,   128, 96 KB
using Cfg4 = Tile<2, 4, 2, 1, 8>;  // 64 x 32,   64,  96 KB
using Cfg5 = Tile<2, 1, 4, 1, 6>;  // 128 x 8,   128, 102 KB
using Cfg6 = Tile<2, 8, 2, 2, 4>;  // 64 x 128,  128, 96 KB
using Cfg7 = Tile<2, 8, 4, 2, 4>;  // 128 x 128, 256, 128 KB
using Cfg8 = Tile<2, 8, 4, 4, 4>;  // 128 x 256, 512, 192 KB
using Cfg9 = Tile<2, 8, 2, 4, 4>;  // 64 x 256,  256, 160 KB
// Two CTAs of 8 warps per SM for 65 to 256 rows: one CTA's barriers and
// epilogue overlap the other's loads and products (the sweep also tried
// 128 x 32, 128 x 64 of 4 warps, 64 x 128, 64 x 256 and 128 x 256 tiles of
// 2-3 stages: none was needed).
using Cfg10 = Tile<2, 8, 4, 2, 3>;  // 128 x 128, 256, 96 KB
using Cfg11 = Tile<2, 4, 4, 2, 4>;  // 128 x 64,  256, 96 KB
#if defined(DAPO_CUDA_WGMMA)
// wgmma (sm_90a): warpgroups of 64 weight rows x 64-256 input rows.
using Cfg12 = Tile<1, 8, 4, 1, 6, true>;    // 64 x 64,   128, 96 KB
using Cfg13 = Tile<1, 16, 4, 1, 4, true>;   // 64 x 128,  128, 96 KB
using Cfg14 = Tile<1, 16, 8, 1, 3, true>;   // 128 x 128, 256, 96 KB
using Cfg15 = Tile<1, 16, 8, 1, 5, true>;   // 128 x 128, 256, 160 KB
using Cfg16 = Tile<1, 32, 8, 1, 3, true>;   // 128 x 256, 256, 144 KB
// Wider weight tiles: every CTA reads its input rows from L2 once per
// k-block, so 256 weight rows per tile read the input a quarter as often
// as 64.
using Cfg17 = Tile<1, 16, 16, 1, 3, true>;  // 256 x 128, 512, 144 KB
using Cfg18 = Tile<1, 8, 16, 1, 4, true>;   // 256 x 64,  512, 160 KB
using Cfg19 = Tile<1, 16, 12, 1, 4, true>;  // 192 x 128, 384, 160 KB
// Whole heads of 128 for the RoPE epilogue where the plan has 64-row tiles.
using Cfg20 = Tile<1, 8, 8, 1, 4, true>;    // 128 x 64,  256, 96 KB
// TMA producer + wgmma consumers (threads: consumers + a producer warpgroup).
using Cfg21 = Tile<1, 16, 8, 1, 5, true, true>;   // 128 x 128, 256 + 128, 160 KB
using Cfg22 = Tile<1, 16, 16, 1, 4, true, true>;  // 256 x 128, 512 + 128, 192 KB
using Cfg23 = Tile<1, 8, 8, 1, 6, true, true>;    // 128 x 64,  256 + 128, 144 KB
using Cfg24 = Tile<1, 16, 4, 1, 8, true, true>;   // 64 x 128,  128 + 128, 192 KB
using Cfg25 = Tile<1, 8, 4, 1, 10, true, true>;   // 64 x 64,   128 + 128, 160 KB
constexpr int kConfigs = 26;
constexpr int kTma128x64 = 23, kTma64x128 = 24, kTma64x64 = 25, kTma128x128 = 21;
constexpr bool kWgmmaBuilt = true;
#else
constexpr int kConfigs = 12;
constexpr int kTma128x64 = -1, kTma64x128 = -1, kTma64x64 = -1, kTma128x128 = -1;
constexpr bool kWgmmaBuilt = false;
#endif

template <class F>
void with_config(int id, F&& f) {
  switch (id) {
    case 0: return f(Cfg0{});
    case 1: return f(Cfg1{});
    case 2: return f(Cfg2{});
    case 3: return f(Cfg3{});
    case 4: return f(Cfg4{});
    case 5: return f(Cfg5{});
    case 6: return f(Cfg6{});
    case 7: return f(Cfg7{});
    case 8: return f(Cfg8{});
    case 9: return f(Cfg9{});
    case 10: return f(Cfg10{});
    case 11: return f(Cfg11{});
#if defined(DAPO_CUDA_WGMMA)
    case 12: return f(Cfg12{});
    case 13: return f(Cfg13{});
    case 14: return f(Cfg14{});
    case 15: return f(Cfg15{});
    case 16: return f(Cfg16{});
    case 17: return f(Cfg17{});
    case 18: return f(Cfg18{});
    case 19: return f(Cfg19{});
    case 20: return f(Cfg20{});
    case 21: return f(Cfg21{});
    case 22: return f(Cfg22{});
    case 23: return f(Cfg23{});
    case 24: return f(Cfg24{});
    case 25: return f(Cfg25{});
#endif
    default: DAPO_FAIL("skinny GEMM: no configuration ", id);
  }
}

struct ConfigInfo {
  int bn, bm, threads, smem;
};
ConfigInfo config_info(int id) {
  ConfigInfo c{};
  with_config(id, [&](auto t) {
    using C = decltype(t);
    c = {C::BN, C::BM, C::kThreads, C::kSmem};
  });
  return c;
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

int64_t weight_tiles(std::span<const LinearSegment> segs, int bn) {
  int64_t t = 0;
  for (const LinearSegment& s : segs) t += ceil_div(s.weight.shape[0], bn);
  return t;
}
int64_t total_cols(std::span<const LinearSegment> segs) {
  int64_t n = 0;
  for (const LinearSegment& s : segs) n += s.weight.shape[0];
  return n;
}

// k-blocks per split for `splits` requested splits; the splits actually run
// are ceil(k_blocks / that), so that none is empty.
int64_t k_blocks_per_split(int64_t k_blocks, int64_t splits) {
  return ceil_div(k_blocks, std::clamp<int64_t>(splits, 1, k_blocks));
}

// ---- host checks -------------------------------------------------------------------

void check_tensor(const Ctx& ctx, const Tensor& t, const char* name) {
  check_device(ctx, t, name);
  DAPO_CHECK(t.data != nullptr || t.numel() == 0, name, " ", t.shape_string(), " has no data");
  DAPO_CHECK(t.dtype == DType::bf16 || t.dtype == DType::f32, name, " is ", dtype_name(t.dtype),
             ", expected bf16 or f32");
}

void check_args(const Ctx& ctx, const Tensor& in, std::span<const LinearSegment> segs) {
  DAPO_CHECK(!segs.empty() && segs.size() <= size_t(kMaxLinearSegments), "linear_forward_multi: ", segs.size(),
             " segments, expected 1 to ", kMaxLinearSegments);
  check_tensor(ctx, in, "in");
  DAPO_CHECK(in.ndim == 2, "linear_forward_multi: in ", in.shape_string(), " must be 2-D");
  const int64_t M = in.shape[0], K = in.shape[1];
  for (size_t i = 0; i < segs.size(); ++i) {
    const LinearSegment& s = segs[i];
    check_tensor(ctx, s.out, "out");
    check_tensor(ctx, s.weight, "weight");
    DAPO_CHECK(s.weight.dtype == in.dtype, "linear_forward_multi: in is ", dtype_name(in.dtype), ", segment ", i,
               "'s weight is ", dtype_name(s.weight.dtype));
    DAPO_CHECK(in.dtype == DType::bf16 || s.out.dtype == DType::f32, "linear_forward_multi: f32 operands into a ",
               dtype_name(s.out.dtype), " output; CUDA takes bf16 x bf16 -> bf16 or f32, and f32 x f32 -> f32");
    DAPO_CHECK(s.weight.ndim == 2, "linear_forward_multi: segment ", i, "'s weight ", s.weight.shape_string(),
               " must be 2-D");
    const int64_t N = s.weight.shape[0];
    DAPO_CHECK_SHAPE(s.weight, {N, K});
    DAPO_CHECK_SHAPE(s.out, {M, N});
    if (s.bias.defined()) {
      check_tensor(ctx, s.bias, "bias");
      DAPO_CHECK_SHAPE(s.bias, {N});
    }
    DAPO_CHECK(!overlaps(s.out, in), "linear_forward_multi: segment ", i, "'s out overlaps in");
    for (size_t j = 0; j < segs.size(); ++j) {
      DAPO_CHECK(!overlaps(s.out, segs[j].weight) && !overlaps(s.out, segs[j].bias), "linear_forward_multi: segment ",
                 i, "'s out overlaps segment ", j, "'s weight or bias");
      DAPO_CHECK(j == i || !overlaps(s.out, segs[j].out), "linear_forward_multi: the outputs of segments ", i,
                 " and ", j, " overlap");
    }
  }
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

// The most K splits a plan considers: splits of 2 or more k-blocks, at
// most 6 but for long K (8: down_proj).
int64_t most_splits(int64_t k_blocks) {
  return std::min<int64_t>(k_blocks >= 64 ? kMaxSplits : 6, k_blocks / kMinKBlocksPerSplit);
}

// Whether M rows take the wgmma tiles (an sm_90a build, from 33 rows).
bool uses_wgmma(int64_t M) { return kWgmmaBuilt && M > 32; }

// The plan's L2 hints for a chosen config and split.
void set_prefetch(detail::SkinnyPlan& p, int64_t M, int64_t tiles, int64_t k_blocks) {
  // One stream per CTA over many k-blocks: asking L2 for 256-byte blocks
  // helps there (the LM head: 3-5%), nowhere else measurably.
  p.l2_prefetch = p.splits == 1 && M <= 64;
  // The early L2 prefetch pays where the whole grid starts at once and each
  // CTA has few k-blocks (0.5B o or q/k/v: 3.2 us against 3.5); with 10 or
  // more it cost 5% (0.5B down, 1 row: 6.7 us against 6.2).
  const bool one_wave = tiles <= resident_clusters(p.config, p.splits);
  p.lookahead = one_wave && k_blocks_per_split(k_blocks, p.splits) <= 8 ? 4 : 0;
}

// From 33 rows on an sm_90a build: a wgmma tile of 64 weight rows x 64 input
// rows, or x 128 from 65 rows on more than 20 MB of weights (7B q/k/v at 128
// rows: 19.5 us against 26.8), and the most K splits (up to 6, 8 for long
// K) whose CTAs stay within 1.7 per SM: in the sweep more splits cost more
// in the cluster's merge than they gained (1.5B q/k/v, 128 rows: 7.7 us at
// 2 splits, 8.3 at 3, 11.9 at 4). On the shapes it routes this lands within
// 13% of the best swept plan (7B tp-2 q/k/v at 128 rows), within 3% on most.
detail::SkinnyPlan wgmma_plan(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  detail::SkinnyPlan p;
  const int64_t rows = total_cols(segs);
  const double bytes = 2.0 * double(rows) * double(K);
  p.config = M <= 64 || bytes <= 20e6 ? 12 : 13;
  const ConfigInfo c = config_info(p.config);
  const int64_t tiles = weight_tiles(segs, c.bn) * ceil_div(M, c.bm);
  const int64_t k_blocks = ceil_div(K, kBK);
  const int64_t most = most_splits(k_blocks);
  const double cap = 1.7 * double(sm_count());
  int64_t s = 1;
  for (int64_t want = 2; want <= most; ++want) {
    const int64_t splits = ceil_div(k_blocks, k_blocks_per_split(k_blocks, want));
    if (double(tiles * splits) > cap) break;
    s = splits;
  }
  p.splits = int(s);
  set_prefetch(p, M, tiles, k_blocks);
  return p;
}

// TMA tiles (sm_90a) for q/k/v (3+ segments) and long-K single products
// of 512 rows or more (down_proj; not a lone k_proj, where cuBLASLt wins at
// 65-128 rows) from 33 rows: 64 input rows a tile, or 128 from 65 rows where
// the q/k/v weights pass 8 MB and always for down_proj; 64 or 128 weight
// rows, whichever (with the most K splits up to 4 whose clusters the GPU
// holds at once) runs the most CTAs, 64 on a tie. The H100 sweep at 128
// rows (PlanSweepPerf, best plan us against cuBLASLt) picked these tiles
// and splits on every shape: 0.5B q/k/v 5.05 / 8.09, down 7.77 / 8.34;
// 1.5B q/k/v 6.47 / 10.51, down 14.36 / 15.20; 7B q/k/v 17.5 / 20.3, down
// 54.2 / 59.0.
bool tma_shape(int64_t K, std::span<const LinearSegment> segs) {
  const int64_t rows = total_cols(segs);
  return kWgmmaBuilt && (segs.size() >= 3 || (segs.size() == 1 && K >= 4 * rows && rows >= 512));
}

detail::SkinnyPlan tma_plan(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  const double bytes = 2.0 * double(total_cols(segs)) * double(K);
  const bool tall = M > 64 && (segs.size() == 1 || bytes > 8e6);
  const int64_t k_blocks = ceil_div(K, kBK);
  const int64_t most = std::min<int64_t>(4, most_splits(k_blocks));
  detail::SkinnyPlan best;
  int64_t best_ctas = 0;
  for (const int config : {tall ? kTma64x128 : kTma64x64, tall ? kTma128x128 : kTma128x64}) {
    const ConfigInfo c = config_info(config);
    const int64_t tiles = weight_tiles(segs, c.bn) * ceil_div(M, c.bm);
    int64_t s = 1;
    for (int64_t want = 2; want <= most; ++want) {
      const int64_t splits = ceil_div(k_blocks, k_blocks_per_split(k_blocks, want));
      if (tiles > resident_clusters(config, int(splits))) break;
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

// linear_residual_fold's plan: from 65 to 128 rows, TMA tiles of 64 x 64
// with 4 K splits where those CTAs run in one wave, else skinny_plan's. In
// the H100 0.5B decode step (128 rows) against skinny_plan's: o_proj 64 x 64
// wgmma tiles -> TMA 64 x 64 x 4 splits, the step 1.325 -> 1.305 ms; down
// TMA 64 x 128 -> 64 x 64, 1.325 -> 1.314 (the other tiles and split counts
// swept were slower: 64 x 128, 128 x 64, 128 x 128 tiles, 2, 7 or 8 splits).
// At the 1.5B shapes those CTAs do not fit in one wave (o: 2.86 ms against
// 2.80 with skinny_plan's).
detail::SkinnyPlan fold_plan(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  if (detail::linear_residual_fold_one_wave(M, K, segs[0].weight.shape[0])) {
    detail::SkinnyPlan p;
    p.config = kTma64x64;
    p.splits = 4;
    return p;
  }
  return detail::skinny_plan(M, K, segs);
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
  const ConfigInfo c = config_info(p.config);

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
    tiles += ceil_div(N, c.bn);
  }
  if (n_seg == 0) return;
  const int64_t k_blocks = ceil_div(K, kBK), per_split = k_blocks_per_split(k_blocks, p.splits);
  const int64_t splits = ceil_div(k_blocks, per_split), m_tiles = ceil_div(M, c.bm);
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

int skinny_config_count() { return kConfigs; }

void skinny_config_tile(int config, int& rows_n, int& rows_m) {
  const ConfigInfo c = config_info(config);
  rows_n = c.bn;
  rows_m = c.bm;
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

// Measured on an H100 SXM, 30-50 calls in a CUDA graph, weights rotating
// through 960 MB (cold L2): PlanSweepPerf and DecodeProjectionsPerf of
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
// same H100 sweep at 64, 128 and 256 rows (DAPO_SKINNY_SWEEP_M): they beat
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
bool linear_multi_skinny_preferred(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  if (M < 1 || M > 256) return false;
  const int64_t rows = total_cols(segs);
  const double bytes = 2.0 * double(rows) * double(K);
  if (uses_wgmma(M))
    return (segs.size() >= 3 && (M <= 128 || bytes <= 4e6)) ||
           (segs.size() == 1 &&
            ((M <= 64 && (K >= 4 * rows || rows >= 65536)) || (M <= 128 && tma_shape(K, segs))));
  if (segs.size() >= 3 && (M <= 64 || bytes <= (M <= 128 ? 20e6 : 8e6))) return true;
  if (M <= 8)
    return !(segs.size() == 1 && ((bytes > 10e6 && bytes <= 200e6) || (rows >= 4096 && bytes <= 64e6)));
  if (M > 32) return false;
  return (segs.size() == 2 && bytes <= 24e6) || (K >= 4 * rows && bytes >= 0.5e6 && bytes <= 16e6);
}

SkinnyPlan skinny_plan(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  if (uses_wgmma(M)) return tma_shape(K, segs) ? tma_plan(M, K, segs) : wgmma_plan(M, K, segs);
  SkinnyPlan p;
  // Tiles of 64 weight rows x (M rounded up, at most 64) rows; for more rows
  // 128 x 128 tiles with two CTAs an SM (two m-tiles at 256 rows), or, on
  // small matrices, 64 x 64 (up to 128 rows) and 128 x 64 tiles. From the
  // H100 sweep (PlanSweepPerf): 128-row tiles also beat these on large
  // matrices at 32-64 rows, but cuBLASLt beats both there.
  const int64_t rows = total_cols(segs);
  const bool small = rows <= 2048 && rows * K <= (int64_t(8) << 20);
  p.config = M <= 8 ? 0 : M <= 16 ? 1 : M <= 32 ? 2 : M <= 64 || (small && M <= 128) ? 3 : small ? 11 : 10;
  const ConfigInfo c = config_info(p.config);
  const int64_t tiles = weight_tiles(segs, c.bn) * ceil_div(M, c.bm);
  const int64_t k_blocks = ceil_div(K, kBK);
  // The most K splits whose clusters all fit on the GPU at once, with a
  // tenth to spare: a second wave of clusters costs more than the split
  // saves (an H100 ran 0.5B q/k/v at 128 rows in 10.7 us with 7 splits,
  // whose 36 clusters did not all fit, and 6.1 us with 5); 5 and 7 happen
  // when a split count does not divide the k-blocks evenly.
  const int64_t most = most_splits(k_blocks);
  int64_t s = 1;
  for (const int64_t want : {2, 3, 4, 6, 8}) {
    if (want > most) break;
    const int64_t splits = ceil_div(k_blocks, k_blocks_per_split(k_blocks, want));
    if (double(tiles) > 0.9 * double(resident_clusters(p.config, int(splits)))) break;
    s = splits;
  }
  p.splits = int(s);
  set_prefetch(p, M, tiles, k_blocks);
  return p;
}

void linear_forward_multi_skinny(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments,
                                 const SkinnyPlan* plan, const RowNorm* rn) {
  check_args(ctx, in, segments);
  DAPO_CHECK(linear_multi_skinny_supported(in, segments), "linear_forward_multi: the skinny kernel cannot take in ",
             in.shape_string(), " (", dtype_name(in.dtype), ")");
  const int64_t M = in.shape[0], K = in.shape[1];
  if (M == 0) return;
  run_skinny(ctx, in, segments, plan != nullptr ? *plan : skinny_plan(M, K, segments), PlainEpilogue{}, rn);
}

SkinnyPlan skinny_rope_plan(int64_t M, int64_t K, std::span<const LinearSegment> segments, int64_t head_dim) {
  SkinnyPlan p = skinny_plan(M, K, segments);
  // A tile of 128 weight rows for one of 64, the same K splits: each
  // output's sum runs over the same k-blocks in the same order, so the bits
  // are the plan's. Not below 33 rows: there the twin's halved CTA count
  // cost more than the launch it saves (H100, 1.5B decode step at 4
  // sequences: 2.199 ms against 2.165 with the two ops).
  auto twin = [](int config) {
    if (!kWgmmaBuilt) return -1;
    if (config == 12) return 20;
    if (config == 13) return 14;
    if (config == kTma64x64) return kTma128x64;
    if (config == kTma64x128) return kTma128x128;
    return -1;
  };
  if (config_info(p.config).bn % head_dim != 0) p.config = twin(p.config);
  if (p.config < 0 || config_info(p.config).bn % head_dim != 0) p.config = -1;
  return p;
}

void linear_forward_multi_skinny_rope(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                                      Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta,
                                      const SkinnyPlan& plan, const RowNorm* rn) {
  check_args(ctx, in, qkv);
  DAPO_CHECK(qkv.size() == 3 && linear_multi_skinny_supported(in, qkv),
             "linear_forward_multi_skinny_rope: the skinny kernel cannot take in ", in.shape_string());
  const int64_t M = in.shape[0], D = k_cache.shape[3];
  DAPO_CHECK(plan.config >= 0 && plan.config < kConfigs && config_info(plan.config).bn % D == 0,
             "linear_forward_multi_skinny_rope: tiles of ", plan.config >= 0 ? config_info(plan.config).bn : 0,
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
  run_skinny(ctx, in, qkv, plan, e, rn);
}

bool linear_residual_fold_one_wave(int64_t M, int64_t K, int64_t N) {
  if (!kWgmmaBuilt || M <= 64 || M > 128) return false;
  const int64_t k_blocks = ceil_div(K, kBK);
  const int64_t splits = ceil_div(k_blocks, k_blocks_per_split(k_blocks, 4));
  return splits == 4 && ceil_div(N, 64) * ceil_div(M, 64) * splits <= sm_count();
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
  check_args(ctx, in, seg);
  DAPO_CHECK(linear_residual_fold_supported(y, in, weight), "linear_residual_fold: the skinny kernel cannot take in ",
             in.shape_string(), " and y ", y.shape_string());
  for (const auto& [t, name] : {std::pair{&sum, "sum"}, {&res, "res"}, {&norm_weight, "norm_weight"}}) {
    check_device(ctx, *t, name);
    DAPO_CHECK(t->dtype == DType::bf16 && reinterpret_cast<uintptr_t>(t->data) % 8 == 0, "linear_residual_fold: ",
               name, " must be 8-byte aligned bf16");
  }
  check_device(ctx, ssq, "ssq");
  const int64_t M = in.shape[0], K = in.shape[1];
  if (M == 0 || weight.shape[0] == 0) return;
  FoldEpilogue e{};
  e.res = static_cast<const bf16_t*>(res.data);
  e.sum = static_cast<bf16_t*>(sum.data);
  e.norm_weight = static_cast<const bf16_t*>(norm_weight.data);
  e.ssq = ssq.ptr<float>();
  e.parts = int32_t(norm_fold_parts(weight.shape[0]));
  run_skinny(ctx, in, seg, plan != nullptr ? *plan : fold_plan(M, K, seg), e, nullptr);
}

int linear_forward_multi_cublaslt(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  check_args(ctx, in, segments);
  return cublaslt_groups(ctx, in, segments);
}

}  // namespace detail

void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  check_args(ctx, in, segments);
  const int64_t M = in.shape[0], K = in.shape[1];
  if (M == 0) return;
  if (detail::linear_multi_skinny_supported(in, segments) && detail::linear_multi_skinny_preferred(M, K, segments))
    return detail::linear_forward_multi_skinny(ctx, in, segments, nullptr);
  cublaslt_groups(ctx, in, segments);
}

}  // namespace dapo::ops::cuda
