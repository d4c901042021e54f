// CUDA paged attention over the bf16 paged KV cache (contract:
// include/dapo/ops/kv_cache.h), decode first.
//
// Decode is a pass over the cache: per (sequence, KV head) the context's K
// and V are read once, and the group of Hq / Hkv query heads (6 or 7 for
// Qwen2.5) shares them. The arithmetic runs on the tensor cores with the
// products transposed so that the query rows, not the keys, are the MMA's
// narrow side: S^T = K Q^T and O^T = V^T P^T with mma.m16n8k16 (M = 16 keys
// or 16 head dims, N = 8 query rows, K = 16). K and V go straight from global
// memory into the MMA's A fragments (16-byte loads; the head dims are
// permuted consistently between q and K, and between V and the output, so
// that each thread's loads are contiguous), P is rounded to bf16 (as
// FlashAttention does; the softmax statistics and all sums stay fp32) and
// moved from the score layout into the B fragment with movmatrix.trans.
//
// CTA = (partition of a sequence's keys, KV head, query split, sequence),
// kWarps warps. Each warp walks 16 * KT keys per step (8 KB of K + V in
// flight per warp whatever D) with its own online softmax; the warps are
// combined in warp order through shared memory at the end. The loads are
// software-pipelined (the next step's K is issued once this step's scores
// are made, its V once this step's P.V is done), and a CTA reads its first
// block-table entries before its sequence's metadata arrives. Long contexts
// are split over CTAs (split-KV): each writes its partial (max, sum, acc)
// and a merge kernel, launched as a programmatic dependent so that its
// launch overlaps the main grid's tail, combines them in partition order.
// The split is chosen on the host from shapes, max_context_len and the
// device's CTA slots only (ops/plan/paged_attention_plan.h), and every reduction has a fixed
// order: bit-identical reruns and a launch sequence a CUDA graph can
// capture (the perf test runs it captured).
//
// Decode with D 64 or 128 runs paged_attention_smem_kernel instead: the same
// step, with K and V staged through shared memory by cp.async, 3 steps
// (24 KB) in flight per warp, which the register pipeline (one step) cannot
// hold: on an H100 it streams 2.2-2.5 TB/s at 512 positions, batch 128,
// where the register kernel reached 1.7-2.1. A merge group may be a
// thread-block cluster merged through distributed shared memory. Its warps
// issue their first steps of older keys before the dependency wait, while
// the previous kernel (q/k/v) still runs.
//
// Multi-token queries (prefill, chunked prefill) run through the same kernel
// as tiles of 8 (token, head) rows with causal masking per row, the tiles of
// a sequence spread over `qsplit` CTAs; correct, not tuned.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include <cooperative_groups.h>

#include "attention/attention_paged_exact.h"
#include "common.cuh"
#include "ptx/mma_ptx.cuh"
#include "ptx/pdl.cuh"
#include "dapo/core/arena.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/plan/paged_attention_plan.h"
#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
namespace cg = cooperative_groups;
using bf16_t = __nv_bfloat16;

constexpr int kRows = int(plan::kPagedRowsPerTile);  // query rows (token, head) per tile: the MMA's N
constexpr int kWarps = int(plan::kPagedWarps);
constexpr int kThreads = kWarps * 32;
// CTAs per SM the register budget is cut for: D 64 at 4 (128 registers, 20
// bytes spilled outside the key loop; on an H100 about 4% faster than 3 at
// batch 128 x 4k, up to 7% slower at batch 8-32), the others at 3 (at most
// 168 registers, no spills).
template <int D>
constexpr int kMinBlocks = D == 64 ? 4 : 3;
constexpr float kLog2e = 1.4426950408889634f;

// Per head dim: how a thread's loads map onto the MMA fragments.
template <int D>
struct Geo {
  static constexpr int KT = D >= 128 ? 1 : 128 / D;  // 16-key MMA tiles per warp step (8 KB of K+V)
  static constexpr int TK = 16 * KT;                  // keys per warp step
  static constexpr int KS = D / 16;                   // q.K k-steps = P.V m-tiles
  // K (and q): lane (g, c) holds D / 4 elements of its key, in chunks of CW
  // at d = j * 4 * CW + c * CW; k-step s uses the chunk words 2s, 2s+1.
  static constexpr int CW = D >= 32 ? 8 : 4;
  static constexpr int NC = D / (4 * CW);
  static constexpr int KW = D / 8;  // words (bf16 pairs) per key
  // V: lane (g, c) holds D / 8 elements of each of its 4 keys, in pieces of
  // PW at d = p * 8 * PW + g * PW; m-tile t uses word t, i.e. output dims
  // vdim(t, g) and vdim(t, g) + 1.
  static constexpr int PW = D >= 64 ? 8 : D / 8;
  static constexpr int NP = D / 8 / PW;
  static constexpr int WP = PW / 2;  // words per piece
  static constexpr int VW = D / 16;  // words per key
  static constexpr int SLOTS = TK >= 32 ? TK / 32 : 1;  // keys whose slot one lane looks up per step
  static constexpr int unit = kWarps * TK;              // partition lengths are multiples of this
  static_assert(unit == plan::paged_unit(D), "the host plan (ops/plan/paged_attention_plan.h) steps otherwise");
  __device__ static constexpr int vdim(int t, int g) { return (t / WP) * 8 * PW + g * PW + 2 * (t % WP); }
};

struct PagedArgs {
  bf16_t* out;        // (N, Hq, D)
  const bf16_t* q;    // (N, Hq, D)
  const bf16_t* kc;   // (num_blocks, block_size, Hkv, D)
  const bf16_t* vc;
  const int32_t* table;  // (B, max_blocks)
  const int32_t* lens;   // (B)
  const int32_t* cu;     // (B+1)
  float* part_m;         // (N*Hq, num_parts) running max (log2 units); null with one partition
  float* part_l;         // (N*Hq, num_parts) sum of weights
  float* part_acc;       // (N*Hq, num_parts, D) unnormalised P.V
  int64_t num_blocks;
  int64_t N;
  int block_size, bs_shift;  // bs_shift >= 0 when block_size is a power of two
  int max_blocks, B, Hq, Hkv, group;
  int part_len;   // keys per CTA
  int num_parts;  // merge groups per (sequence, KV head, query split): partials the merge kernel combines
  int csize;      // CTAs per merge group: one cluster, merged in distributed shared memory
  int qsplit, max_ctx;
  float scale_log2;  // scale * log2(e): scores in log2 units, exp2 in the softmax
  DeviceFlags* flags;  // bad metadata (FlagSite::paged_metadata); null: not recorded
};

// Whether sequence b's metadata is consistent; malformed sequences are
// skipped by both kernels alike (the CPU op diagnoses them; on the GPU the
// partition kernels flag them, see flag_sequence).
__device__ __forceinline__ bool sequence_ok(const PagedArgs& a, int b, int& len, int& q0, int& nq) {
  len = a.lens[b];
  q0 = a.cu[b];
  nq = a.cu[b + 1] - q0;
  return len >= 0 && len <= a.max_ctx && int64_t(len) <= int64_t(a.max_blocks) * a.block_size && nq >= 0 &&
         nq <= len && q0 >= 0 && int64_t(q0) + nq <= a.N;
}

// A malformed sequence b, flagged once (by thread 0 of the CTA of its first
// partition, first KV head and first query split): its output rows are
// left unwritten, and the host's check of the flags reports it.
__device__ __forceinline__ void flag_sequence(const PagedArgs& a, int b, int part, int y, int len) {
  if (part == 0 && y == 0 && threadIdx.x == 0) flag_bad_id(a.flags, FlagSite::paged_metadata, b, len);
}

// E consecutive bf16 (E * 2 bytes, aligned to that) into E / 2 words,
// through the read-only path.
template <int E>
__device__ __forceinline__ void load_words(const bf16_t* p, uint32_t* w) {
  if constexpr (E == 8) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
  } else if constexpr (E == 4) {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = x.x, w[1] = x.y;
  } else {
    static_assert(E == 2);
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
}

__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Transposes the warp's 8x8 bf16 matrix held one word (row lane/4, columns
// 2 (lane%4), +1) per lane.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

// One key step of the online softmax, for the two query rows a lane holds:
// s (scaled logits, -inf where masked) becomes exp2(s - new row max), and l
// and acc are rescaled to that max. The max of a row is warp-uniform
// (butterfly over the 8 lanes that share it), the sums stay per lane until
// the end.
template <int KT, int KS>
__device__ __forceinline__ void online_softmax_step(float (&s)[KT][4], float (&m)[2], float (&l)[2],
                                                    float (&acc)[KS][4]) {
  float alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) mx = fmaxf(mx, fmaxf(s[kt][r], s[kt][r + 2]));
#pragma unroll
    for (int o = 4; o < 32; o *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float m_new = fmaxf(m[r], mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key yet: weights 0, no NaN
    alpha[r] = exp2f(m[r] - m_use);
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {
      s[kt][r] = exp2f(s[kt][r] - m_use);
      s[kt][r + 2] = exp2f(s[kt][r + 2] - m_use);
      sum += s[kt][r] + s[kt][r + 2];
    }
    l[r] = l[r] * alpha[r] + sum;
  }
#pragma unroll
  for (int t2 = 0; t2 < KS; ++t2) {
    acc[t2][0] *= alpha[0];
    acc[t2][1] *= alpha[1];
    acc[t2][2] *= alpha[0];
    acc[t2][3] *= alpha[1];
  }
}

// The end of a row tile: the merge group's CTAs (a cluster when csize > 1)
// combine their warps' softmax states (s_m, s_l, s_acc, written by every
// warp) in (CTA, warp) order, each CTA a share of the outputs, reading the
// others' shared memory; the result goes to out, or to the group's partial
// when several groups are merged by the merge kernel.
template <int D>
__device__ __forceinline__ void merge_tile(const PagedArgs& a, float (*s_acc)[kRows][D + 2], float (*s_m)[kRows],
                                           float (*s_l)[kRows], int t, int rows_total, int g, int q0, int part) {
  const int cs = a.csize;
  const cg::cluster_group cluster = cg::this_cluster();
  if (cs > 1) cluster.sync();
  else __syncthreads();
  const int rank = cs > 1 ? int(cluster.block_rank()) : 0;
  auto peer = [&](float* p, int src) -> const float* { return cs > 1 ? cluster.map_shared_rank(p, src) : p; };
  for (int e = rank * kThreads + threadIdx.x; e < kRows * D / 2; e += cs * kThreads) {
    const int r = e / (D / 2), d = 2 * (e % (D / 2)), row = t * kRows + r;
    if (row >= rows_total) continue;
    float mm = -INFINITY;
    for (int src = 0; src < cs; ++src) {
      const float* pm = peer(&s_m[0][0], src);
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, pm[w * kRows + r]);
    }
    const float mu = mm == -INFINITY ? 0.0f : mm;
    float ll = 0.0f, o0 = 0.0f, o1 = 0.0f;
    for (int src = 0; src < cs; ++src) {
      const float* pm = peer(&s_m[0][0], src);
      const float* pl = peer(&s_l[0][0], src);
      const float* pa = peer(&s_acc[0][0][0], src);
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float sc = exp2f(pm[w * kRows + r] - mu);
        const float2 x = *reinterpret_cast<const float2*>(pa + (w * kRows + r) * (D + 2) + d);
        ll = fmaf(pl[w * kRows + r], sc, ll);
        o0 = fmaf(x.x, sc, o0);
        o1 = fmaf(x.y, sc, o1);
      }
    }
    const int i = row / a.group, h = g * a.group + row % a.group;
    const int64_t orow = int64_t(q0 + i) * a.Hq + h;
    if (a.part_acc == nullptr) {
      const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;  // a row whose every key is masked: zeros
      *reinterpret_cast<__nv_bfloat162*>(a.out + orow * D + d) = __floats2bfloat162_rn(o0 * inv, o1 * inv);
    } else {
      const int64_t pr = orow * a.num_parts + part / cs;
      *reinterpret_cast<float2*>(a.part_acc + pr * D + d) = make_float2(o0, o1);
      if (d == 0) {
        a.part_m[pr] = mm;
        a.part_l[pr] = ll;
      }
    }
  }
  // s_acc, s_m, s_l are reused by the next tile; in a cluster, no CTA
  // leaves (or overwrites them) while another reads them.
  if (cs > 1) cluster.sync();
  else __syncthreads();
}

template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) paged_attention_kernel(const PagedArgs a) {
  using G = Geo<D>;
  __shared__ float s_acc[kWarps][kRows][D + 2];
  __shared__ float s_m[kWarps][kRows], s_l[kWarps][kRows];

  // The next kernel (the merge, or the next op's when launched as a
  // programmatic dependent) may be set up now; it waits for this grid's
  // completion before reading anything this grid writes.
  pdl_launch_dependents();
  const int part = blockIdx.x, b = blockIdx.z;
  const int g = blockIdx.y / a.qsplit, qs = blockIdx.y % a.qsplit;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, lg = lane / 4, lc = lane % 4;
  const int s0 = part * a.part_len;
  const int32_t* table = a.table + int64_t(b) * a.max_blocks;

  // Flat cache slot of key p (p < max_blocks * block_size), or -1 when its
  // block id is out of range (the key is then masked).
  auto lookup_raw = [&](int p) -> int {
    const int n = a.bs_shift >= 0 ? p >> a.bs_shift : p / a.block_size;
    const int off = a.bs_shift >= 0 ? p & (a.block_size - 1) : p - n * a.block_size;
    const int blk = table[n];
    if (blk < 0 || blk >= a.num_blocks) {  // a key inside the length in no block of the pool: bad metadata
      flag_bad_id(a.flags, FlagSite::paged_metadata, b, blk);
      return -1;
    }
    return blk * a.block_size + off;
  };
  // Lane l looks up key base + i * 32 + l (TK >= 32) or base + l % 16; the
  // lanes that load a key get its slot by shuffle. Keys past kend: -1.
  auto key_of = [&](int base, int i) { return base + (G::TK >= 32 ? i * 32 + lane : lane % 16); };
  auto fetch_slots = [&](int (&slot)[G::SLOTS], int base, int kend) {
#pragma unroll
    for (int i = 0; i < G::SLOTS; ++i) slot[i] = key_of(base, i) < kend ? lookup_raw(key_of(base, i)) : -1;
  };
  // The first step's table entries are read before the sequence's length
  // arrives (any entry of the row may be read; those past the context are
  // dropped below), saving one memory round trip at the CTA's start.
  int slot0[G::SLOTS];
  const int64_t table_keys = int64_t(a.max_blocks) * a.block_size;
#pragma unroll
  for (int i = 0; i < G::SLOTS; ++i) {
    const int p = key_of(s0 + warp * G::TK, i);
    slot0[i] = p < table_keys ? lookup_raw(p) : -1;
  }

  int len, q0, nq;
  const bool ok = sequence_ok(a, b, len, q0, nq);
  // The block table and the lengths come from the step's metadata copy,
  // done before the previous kernel started; q and the new keys and values
  // may come from that kernel (this grid may be its programmatic
  // dependent): wait for it before reading them or writing anything.
  pdl_wait();
  if (!ok) {
    flag_sequence(a, b, part, blockIdx.y, len);
    return;
  }
  // A merge group (cluster) wholly past the sequence's end has nothing to
  // do (the merge reads only the groups that hold keys); the CTAs of a
  // group that holds some stay to the end, empty or not, because they
  // share the merge (exits are cluster-uniform).
  const int cs = a.csize;
  if ((part / cs) * cs * a.part_len >= len) return;
  const int e0 = min(s0 + a.part_len, len);
  const int rows_total = nq * a.group;
  const int64_t slot_stride = int64_t(a.Hkv) * D;
  const bf16_t* kc = a.kc + int64_t(g) * D + lc * G::CW;
  const bf16_t* vc = a.vc + int64_t(g) * D + lg * G::PW;

  for (int t = qs; t * kRows < rows_total; t += a.qsplit) {
    uint32_t qf[G::KW];
    {
      const int row = t * kRows + lg;
      if (row < rows_total) {
        const int i = row / a.group, h = g * a.group + row % a.group;
        const bf16_t* qp = a.q + (int64_t(q0 + i) * a.Hq + h) * D + lc * G::CW;
#pragma unroll
        for (int j = 0; j < G::NC; ++j) load_words<G::CW>(qp + j * 4 * G::CW, qf + j * (G::CW / 2));
      } else {
#pragma unroll
        for (int j = 0; j < G::KW; ++j) qf[j] = 0;
      }
    }
    int pos[2];  // positions of this lane's score rows 2c, 2c+1 (-1: no row)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = t * kRows + 2 * lc + r;
      pos[r] = row < rows_total ? len - nq + row / a.group : -1;
    }
    const int last = min(t * kRows + kRows, rows_total) - 1;
    const int kend = min(e0, len - nq + last / a.group + 1);  // causal: no row of the tile sees keys past this

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[G::KS][4];
#pragma unroll
    for (int s = 0; s < G::KS; ++s) acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = 0.0f;

    // Software pipeline over the warp's steps: the next step's K is loaded
    // once this step's scores are made, its V once this step's P.V is done,
    // and the table reads one step further ahead, so a warp keeps about a
    // step of K + V in flight without a second register buffer.
    constexpr int kStep = kWarps * G::TK;
    uint32_t kw[G::KT][2][G::KW];  // keys g, g + 8 of each 16-key tile
    uint32_t vw[G::KT][4][G::VW];  // keys 2c, 2c+1, 2c+8, 2c+9
    bool kok[G::KT][2];
    auto load_k = [&](const int (&slot)[G::SLOTS]) {
#pragma unroll
      for (int kt = 0; kt < G::KT; ++kt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int sl = __shfl_sync(0xffffffffu, slot[kt / 2], (kt % 2) * 16 + lg + 8 * j);
          kok[kt][j] = sl >= 0;
          if (sl >= 0) {
            const bf16_t* p = kc + int64_t(sl) * slot_stride;
#pragma unroll
            for (int c = 0; c < G::NC; ++c) load_words<G::CW>(p + c * 4 * G::CW, kw[kt][j] + c * (G::CW / 2));
          } else {
#pragma unroll
            for (int w = 0; w < G::KW; ++w) kw[kt][j][w] = 0;
          }
        }
      }
    };
    auto load_v = [&](const int (&slot)[G::SLOTS]) {
#pragma unroll
      for (int kt = 0; kt < G::KT; ++kt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int sl = __shfl_sync(0xffffffffu, slot[kt / 2], (kt % 2) * 16 + 2 * lc + (j % 2) + 8 * (j / 2));
          if (sl >= 0) {
            const bf16_t* p = vc + int64_t(sl) * slot_stride;
#pragma unroll
            for (int c = 0; c < G::NP; ++c) load_words<G::PW>(p + c * 8 * G::PW, vw[kt][j] + c * G::WP);
          } else {
            // masked keys read as zeros: their weight is 0, and 0 * garbage could be NaN
#pragma unroll
            for (int w = 0; w < G::VW; ++w) vw[kt][j][w] = 0;
          }
        }
      }
    };
    int base = s0 + warp * G::TK;
    int slot[G::SLOTS];
    if (t == qs) {
#pragma unroll
      for (int i = 0; i < G::SLOTS; ++i) slot[i] = key_of(base, i) < kend ? slot0[i] : -1;
    } else {
      fetch_slots(slot, base, kend);
    }
    load_k(slot);
    load_v(slot);
    fetch_slots(slot, base + kStep, kend);
    for (; base < kend; base += kStep) {
      const bool more = base + kStep < kend;  // warp-uniform

      // Scores S^T (keys x rows); lane holds keys g, g+8 x rows 2c, 2c+1.
      // Two accumulators halve the MMA dependency chain.
      float s[G::KT][4];
#pragma unroll
      for (int kt = 0; kt < G::KT; ++kt) {
        float c4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < G::KS; ++ks)
          mma_16816(ks % 2 == 0 ? c4 : d4, kw[kt][0][2 * ks], kw[kt][1][2 * ks], kw[kt][0][2 * ks + 1],
                    kw[kt][1][2 * ks + 1], qf[2 * ks], qf[2 * ks + 1]);
        const int p = base + kt * 16 + lg;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = p + 8 * (e / 2);
          s[kt][e] = (kok[kt][e / 2] && key <= pos[e % 2]) ? (c4[e] + d4[e]) * a.scale_log2 : -INFINITY;
        }
      }
      if (more) load_k(slot);
      online_softmax_step<G::KT, G::KS>(s, m, l, acc);
      // O^T += V^T P^T.
#pragma unroll
      for (int kt = 0; kt < G::KT; ++kt) {
        const uint32_t b0 = transpose8x8(pack_bf16(s[kt][0], s[kt][1]));
        const uint32_t b1 = transpose8x8(pack_bf16(s[kt][2], s[kt][3]));
#pragma unroll
        for (int t2 = 0; t2 < G::KS; ++t2) {
          const uint32_t a0 = __byte_perm(vw[kt][0][t2], vw[kt][1][t2], 0x5410);
          const uint32_t a1 = __byte_perm(vw[kt][0][t2], vw[kt][1][t2], 0x7632);
          const uint32_t a2 = __byte_perm(vw[kt][2][t2], vw[kt][3][t2], 0x5410);
          const uint32_t a3 = __byte_perm(vw[kt][2][t2], vw[kt][3][t2], 0x7632);
          mma_16816(acc[t2], a0, a1, a2, a3, b0, b1);
        }
      }
      if (more) {
        load_v(slot);
        fetch_slots(slot, base + 2 * kStep, kend);
      }
    }

    // Combine the warps in warp order.
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int o = 4; o < 32; o *= 2) l[r] += __shfl_xor_sync(0xffffffffu, l[r], o);
    if (lg == 0) {
      s_m[warp][2 * lc] = m[0];
      s_m[warp][2 * lc + 1] = m[1];
      s_l[warp][2 * lc] = l[0];
      s_l[warp][2 * lc + 1] = l[1];
    }
#pragma unroll
    for (int t2 = 0; t2 < G::KS; ++t2) {
      const int d = G::vdim(t2, lg);
      s_acc[warp][2 * lc][d] = acc[t2][0];
      s_acc[warp][2 * lc + 1][d] = acc[t2][1];
      s_acc[warp][2 * lc][d + 1] = acc[t2][2];
      s_acc[warp][2 * lc + 1][d + 1] = acc[t2][3];
    }
    merge_tile<D>(a, s_acc, s_m, s_l, t, rows_total, g, q0, part);
  }
}

// Decode kernel with the K and V stream staged in shared memory: each warp
// keeps S steps (S * 8 KB) of its keys in flight with cp.async (no register
// cost, so S steps are issued before the first is used), and reads the MMA
// fragments with ldmatrix from rows swizzled against bank conflicts (the
// 16-byte chunk c of key row r sits at c ^ (r % 8)). The step, the softmax
// and the merges are those of paged_attention_kernel; q and the output use
// the natural head-dim order. D 64 or 128.
template <int D, int S>
struct SmemGeo {
  using G = Geo<D>;
  static constexpr int CPR = D / 8;                         // 16-byte chunks per key row
  static constexpr int kTileBytes = G::TK * D * 2;          // K (or V) of one warp step
  static constexpr int kStageBytes = 2 * kTileBytes;        // 8 KB
  static constexpr int kWarpBytes = S * kStageBytes;
  static constexpr int kSmem = kWarps * kWarpBytes;         // s_acc aliases the stages at the end
  static_assert(kSmem >= int(sizeof(float)) * kWarps * kRows * (D + 2), "s_acc must fit in the stages");
  static_assert(CPR >= 8 && G::TK <= 32, "swizzle and slot shuffles assume D >= 64");
};

template <int D, int S>
__global__ void __launch_bounds__(kThreads) paged_attention_smem_kernel(const PagedArgs a) {
  using G = Geo<D>;
  using SG = SmemGeo<D, S>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float s_m[kWarps][kRows], s_l[kWarps][kRows];
  __shared__ uint32_t s_valid[kWarps][S];  // keys of a stage with a slot (bit i: key i of the step)
  auto s_acc = reinterpret_cast<float(*)[kRows][D + 2]>(smem);

  pdl_launch_dependents();
  const int part = blockIdx.x, b = blockIdx.z;
  const int g = blockIdx.y / a.qsplit, qs = blockIdx.y % a.qsplit;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, lg = lane / 4, lc = lane % 4;
  const int s0 = part * a.part_len;
  const int32_t* table = a.table + int64_t(b) * a.max_blocks;
  int len, q0, nq;
  const bool ok = sequence_ok(a, b, len, q0, nq);
  const int cs = a.csize;
  const int rows_total = nq * a.group;
  // Exits are cluster-uniform (a cluster spans partitions only).
  if (!ok || (part / cs) * cs * a.part_len >= len || qs * kRows >= rows_total) {
    pdl_wait();
    if (!ok) flag_sequence(a, b, part, blockIdx.y, len);
    return;
  }
  const int e0 = min(s0 + a.part_len, len);
  const int64_t slot_stride = int64_t(a.Hkv) * D;
  const bf16_t* kc = a.kc + int64_t(g) * D;
  const bf16_t* vc = a.vc + int64_t(g) * D;
  const uint32_t wbase = smem_u32(smem) + uint32_t(warp * SG::kWarpBytes);
  constexpr int kStep = kWarps * G::TK;

  // Slot of key base + lane % TK, or -1 (past kend, or a block id out of range).
  auto fetch = [&](int base, int kend) -> int {
    const int p = base + lane % G::TK;
    if (p >= kend) return -1;
    const int n = a.bs_shift >= 0 ? p >> a.bs_shift : p / a.block_size;
    const int off = a.bs_shift >= 0 ? p & (a.block_size - 1) : p - n * a.block_size;
    const int blk = table[n];
    if (blk < 0 || blk >= a.num_blocks) {  // a key inside the length in no block of the pool: bad metadata
      flag_bad_id(a.flags, FlagSite::paged_metadata, b, blk);
      return -1;
    }
    return blk * a.block_size + off;
  };
  auto issue = [&](int stage, int sl) {
    const uint32_t sk = wbase + uint32_t(stage * SG::kStageBytes), sv = sk + SG::kTileBytes;
    const uint32_t valid = __ballot_sync(0xffffffffu, sl >= 0);
    if (lane == 0) s_valid[warp][stage] = valid;
    if (valid != 0) {
#pragma unroll
      for (int j = 0; j < G::TK * SG::CPR / 32; ++j) {
        const int i = j * 32 + lane, r = i / SG::CPR, c = i % SG::CPR;
        const int slr = __shfl_sync(0xffffffffu, sl, r);
        const uint32_t off = uint32_t((r * SG::CPR + (c ^ (r & 7))) * 16);
        const int64_t src = int64_t(max(slr, 0)) * slot_stride + c * 8;
        cp_async_16(sk + off, kc + src, slr >= 0);
        cp_async_16(sv + off, vc + src, slr >= 0);
      }
    }
    cp_async_commit();
  };

  for (int t = qs; t * kRows < rows_total; t += a.qsplit) {
    int pos[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = t * kRows + 2 * lc + r;
      pos[r] = row < rows_total ? len - nq + row / a.group : -1;
    }
    const int last = min(t * kRows + kRows, rows_total) - 1;
    const int kend = min(e0, len - nq + last / a.group + 1);
    const int w0 = s0 + warp * G::TK;
    const int nsteps = kend > w0 ? (kend - w0 + kStep - 1) / kStep : 0;
    // The first S steps' table entries (read before waiting for the
    // previous kernel: they come from the step's metadata).
    int sl[S];
#pragma unroll
    for (int st = 0; st < S; ++st) sl[st] = fetch(w0 + st * kStep, kend);
    // The keys before this step's new ones were written by earlier steps
    // (and the step's copy-on-writes, launched before the step's first
    // kernel): a warp whose first S steps hold only those issues their loads
    // before waiting for the previous kernel, which wrote q and the new keys
    // and values (every grid before that kernel has completed: pdl.cuh).
    // H100, decode graph, against the wait first: attention 0.5B 382 -> 349
    // us a step, 1.5B 788 -> 664, q/k/v (which now shares the memory with
    // them) 149 -> 170 and 283 -> 363; step 1.287 -> 1.281 ms and 2.658 ->
    // 2.612.
    const bool early = t == qs && min(kend, w0 + (S - 1) * kStep + G::TK) <= len - nq;
    if (t == qs && !early) pdl_wait();
#pragma unroll
    for (int st = 0; st < S; ++st) issue(st, sl[st]);
    if (early) pdl_wait();
    int next = fetch(w0 + S * kStep, kend);

    // q as the B fragments of S^T = K Q^T: row g, dims 16 s + 2 c (+1) and + 8.
    uint32_t qf[G::KS][2];
    {
      const int row = t * kRows + lg;
      if (row < rows_total) {
        const int i = row / a.group, h = g * a.group + row % a.group;
        const bf16_t* qp = a.q + (int64_t(q0 + i) * a.Hq + h) * D + 2 * lc;
#pragma unroll
        for (int s = 0; s < G::KS; ++s) {
          qf[s][0] = __ldg(reinterpret_cast<const unsigned int*>(qp + 16 * s));
          qf[s][1] = __ldg(reinterpret_cast<const unsigned int*>(qp + 16 * s + 8));
        }
      } else {
#pragma unroll
        for (int s = 0; s < G::KS; ++s) qf[s][0] = qf[s][1] = 0;
      }
    }

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[G::KS][4];
#pragma unroll
    for (int s = 0; s < G::KS; ++s) acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = 0.0f;

    int stage = 0;
    for (int step = 0; step < nsteps; ++step) {
      const int base = w0 + step * kStep;
      cp_async_wait<S - 1>();
      __syncwarp();
      const uint32_t sk = wbase + uint32_t(stage * SG::kStageBytes), sv = sk + SG::kTileBytes;
      const uint32_t valid = s_valid[warp][stage];
      float s[G::KT][4];
#pragma unroll
      for (int kt = 0; kt < G::KT; ++kt) {
        float c4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int r = kt * 16 + (lane & 15);
#pragma unroll
        for (int ks = 0; ks < G::KS; ++ks) {
          const int c = 2 * ks + (lane >> 4);
          uint32_t af[4];
          ldsm_x4(af, sk + uint32_t((r * SG::CPR + (c ^ (r & 7))) * 16));
          mma_16816(ks % 2 == 0 ? c4 : d4, af[0], af[1], af[2], af[3], qf[ks][0], qf[ks][1]);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = kt * 16 + lg + 8 * (e / 2);
          const bool kv = (valid >> kk) & 1u;
          s[kt][e] = (kv && base + kk <= pos[e % 2]) ? (c4[e] + d4[e]) * a.scale_log2 : -INFINITY;
        }
      }
      online_softmax_step<G::KT, G::KS>(s, m, l, acc);
#pragma unroll
      for (int kt = 0; kt < G::KT; ++kt) {
        const uint32_t b0 = transpose8x8(pack_bf16(s[kt][0], s[kt][1]));
        const uint32_t b1 = transpose8x8(pack_bf16(s[kt][2], s[kt][3]));
        const int r = kt * 16 + ((lane >> 4) << 3) + (lane & 7);
#pragma unroll
        for (int t2 = 0; t2 < G::KS; ++t2) {
          const int c = 2 * t2 + ((lane >> 3) & 1);
          uint32_t af[4];
          ldsm_x4_t(af, sv + uint32_t((r * SG::CPR + (c ^ (r & 7))) * 16));
          mma_16816(acc[t2], af[0], af[1], af[2], af[3], b0, b1);
        }
      }
      __syncwarp();  // every lane is done with the stage before it is refilled
      issue(stage, next);
      next = fetch(base + (S + 1) * kStep, kend);
      stage = stage + 1 == S ? 0 : stage + 1;
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int o = 4; o < 32; o *= 2) l[r] += __shfl_xor_sync(0xffffffffu, l[r], o);
    __syncthreads();  // s_acc aliases every warp's stages
    if (lg == 0) {
      s_m[warp][2 * lc] = m[0];
      s_m[warp][2 * lc + 1] = m[1];
      s_l[warp][2 * lc] = l[0];
      s_l[warp][2 * lc + 1] = l[1];
    }
#pragma unroll
    for (int t2 = 0; t2 < G::KS; ++t2) {
      const int d = 16 * t2 + lg;
      s_acc[warp][2 * lc][d] = acc[t2][0];
      s_acc[warp][2 * lc + 1][d] = acc[t2][1];
      s_acc[warp][2 * lc][d + 8] = acc[t2][2];
      s_acc[warp][2 * lc + 1][d + 8] = acc[t2][3];
    }
    merge_tile<D>(a, s_acc, s_m, s_l, t, rows_total, g, q0, part);
  }
}

// One warp per output row (token, head): combines the partitions that hold
// keys the row sees, in partition order (the max and the weight sum by a
// fixed butterfly over lanes holding 32 partitions each).
template <int D>
__global__ void __launch_bounds__(kThreads) paged_attention_merge_kernel(const PagedArgs a) {
  constexpr int E = D >= 64 ? D / 32 : 2;  // output dims per lane (lanes past D idle)
  // Launched as a programmatic dependent of the main kernel: wait for its
  // completion and the visibility of its partials (and let the next
  // kernel's CTAs set up meanwhile).
  pdl_launch_dependents();
  pdl_wait();
  const int64_t orow = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (orow >= a.N * a.Hq) return;
  const int i = int(orow / a.Hq);
  // The sequence of token i: the last b with cu[b] <= i.
  int lo = 0, hi = a.B;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (a.cu[mid] <= i) lo = mid;
    else hi = mid;
  }
  int len, q0, nq;
  if (!sequence_ok(a, lo, len, q0, nq) || i < q0 || i >= q0 + nq) return;
  const int pos = len - nq + (i - q0);
  const int np = min(pos / (a.part_len * a.csize) + 1, a.num_parts);
  const float* pm = a.part_m + orow * a.num_parts;
  const float* pl = a.part_l + orow * a.num_parts;
  const float* pacc = a.part_acc + orow * a.num_parts * D;
  float m = -INFINITY;
  for (int p = lane; p < np; p += 32) m = fmaxf(m, pm[p]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float mu = m == -INFINITY ? 0.0f : m;
  const int d0 = lane * E;
  float l = 0.0f, o[E];
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = 0.0f;
  for (int p0 = 0; p0 < np; p0 += 32) {
    const int p = p0 + lane;
    const float w = p < np ? exp2f(pm[p] - mu) : 0.0f;
    if (p < np) l = fmaf(pl[p], w, l);
    const int n = min(32, np - p0);  // warp-uniform
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
      const float wj = __shfl_sync(0xffffffffu, w, j);
      if (d0 < D) {
        const float* src = pacc + int64_t(p0 + j) * D + d0;
#pragma unroll
        for (int e = 0; e < E; e += 2) {
          const float2 x = *reinterpret_cast<const float2*>(src + e);
          o[e] = fmaf(x.x, wj, o[e]);
          o[e + 1] = fmaf(x.y, wj, o[e + 1]);
        }
      }
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  if (d0 < D) {
#pragma unroll
    for (int e = 0; e < E; e += 2)
      *reinterpret_cast<__nv_bfloat162*>(a.out + orow * D + d0 + e) = __floats2bfloat162_rn(o[e] * inv_l, o[e + 1] * inv_l);
  }
}

// ---- host side -----------------------------------------------------------

template <int D>
const void* kernel_of() {
  return reinterpret_cast<const void*>(&paged_attention_kernel<D>);
}

template <int D, int S>
const void* smem_kernel_of() {
  return reinterpret_cast<const void*>(&paged_attention_smem_kernel<D, S>);
}

// The kernel a plan runs: the register-pipelined one (stages 0) or the
// shared-memory one with that many stages per warp (D 64 and 128).
const void* kernel_for(int64_t D, int64_t stages, int& smem) {
  smem = 0;
  if (stages == 2 && D == 64) return smem = SmemGeo<64, 2>::kSmem, smem_kernel_of<64, 2>();
  if (stages == 3 && D == 64) return smem = SmemGeo<64, 3>::kSmem, smem_kernel_of<64, 3>();
  if (stages == 2 && D == 128) return smem = SmemGeo<128, 2>::kSmem, smem_kernel_of<128, 2>();
  if (stages == 3 && D == 128) return smem = SmemGeo<128, 3>::kSmem, smem_kernel_of<128, 3>();
  DAPO_CHECK(stages == 0, "paged_attention on CUDA: ", stages, " shared-memory stages with head dim ", D,
             " (2 or 3 stages, D 64 or 128)");
  return D == 16 ? kernel_of<16>() : D == 32 ? kernel_of<32>() : D == 64 ? kernel_of<64>() : kernel_of<128>();
}

// CTAs of the main kernel the device holds at once.
int64_t resident_ctas(int64_t D, int64_t stages) {
  int per_sm = 0, smem = 0;
  const void* k = kernel_for(D, stages, smem);
  if (smem > 48 * 1024)
    DAPO_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  DAPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, size_t(smem)));
  return int64_t(sm_count()) * std::max(per_sm, 1);
}

// The host plan's default split on this device (its CTA slots for the
// kernel the split will run).
plan::PagedSplit default_split(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_ctx) {
  return plan::paged_choose_split(N, B, Hq, Hkv, D, max_ctx, resident_ctas(D, plan::paged_default_stages(N, B, D)));
}

template <int D>
void launch_paged(const PagedArgs& a, bool pdl, int64_t stages, cudaStream_t stream) {
  int smem = 0;
  const void* kernel = kernel_for(D, stages, smem);
  if (smem > 48 * 1024)
    DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(a.num_parts * a.csize), unsigned(a.Hkv * a.qsplit), unsigned(a.B));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (a.csize > 1) {  // a merge group's CTAs: one cluster
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = unsigned(a.csize);
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    // A programmatic dependent of the previous kernel: the CTAs start and
    // read their block-table entries while that kernel drains.
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  void* args[] = {const_cast<PagedArgs*>(&a)};
  DAPO_CUDA_CHECK(cudaLaunchKernelExC(&cfg, kernel, args));
  if (a.part_acc != nullptr) {
    // A programmatic dependent launch: the merge grid is set up while the
    // main grid's last CTAs run and waits (griddepcontrol.wait) for its
    // results, instead of paying a full launch gap after it.
    DAPO_CUDA_CHECK(launch_pdl(paged_attention_merge_kernel<D>, dim3(unsigned((a.N * a.Hq + kWarps - 1) / kWarps)),
                               dim3(kThreads), 0, stream, a));
  }
}

void check_shapes_for_plan(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_context_len) {
  DAPO_CHECK(D == 16 || D == 32 || D == 64 || D == 128, "paged_attention on CUDA: head dim ", D,
             " (supported: 16, 32, 64, 128)");
  DAPO_CHECK(Hkv > 0 && Hq % Hkv == 0, "paged_attention: Hq = ", Hq, " is not a multiple of Hkv = ", Hkv);
  DAPO_CHECK(max_context_len > 0 && max_context_len <= (int64_t(1) << 30), "paged_attention: max_context_len ",
             max_context_len, " with ", N, " new tokens");
  DAPO_CHECK(B > 0 && B <= 65535, "paged_attention on CUDA: B = ", B, " sequences (at most 65535)");
}

// The kernels' limits, checked whatever the caller: bf16, D in {16, 32, 64,
// 128}, the plan's and the grid's sizes, 32-bit flat slots, 16-byte rows.
// The contract itself is checked by ops::paged_attention (or, for a forced
// split, by paged_attention_with_split).
void run_paged(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table,
               Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len, float scale,
               const detail::PagedSplit* split) {
  DAPO_CHECK(q.dtype == DType::bf16, "paged_attention on CUDA: q is ", dtype_name(q.dtype), ", expected bf16");
  const int64_t N = q.shape[0], Hq = q.shape[1], num_blocks = k_cache.shape[0], block_size = k_cache.shape[1];
  const int64_t Hkv = k_cache.shape[2], D = k_cache.shape[3];
  const int64_t B = block_table.shape[0], max_blocks = block_table.shape[1];
  DAPO_CHECK(D == 16 || D == 32 || D == 64 || D == 128, "paged_attention on CUDA: head dim ", D,
             " (supported: 16, 32, 64, 128)");
  if (N == 0 || Hq == 0) return;
  check_shapes_for_plan(N, B, Hq, Hkv, D, max_context_len);
  // Flat slots (block * block_size + offset) are 32-bit in the kernel.
  DAPO_CHECK(N * Hq <= (int64_t(1) << 31) / 2 && num_blocks * block_size < (int64_t(1) << 31) &&
                 max_blocks <= (1 << 30),
             "paged_attention on CUDA: shapes too large");
  DAPO_CHECK(aligned16(out.data) && aligned16(q.data) && aligned16(k_cache.data) && aligned16(v_cache.data),
             "paged_attention on CUDA: q, out and the caches must be 16-byte aligned");

  PagedArgs a{};
  a.out = static_cast<bf16_t*>(out.data);
  a.q = static_cast<const bf16_t*>(q.data);
  a.kc = static_cast<const bf16_t*>(k_cache.data);
  a.vc = static_cast<const bf16_t*>(v_cache.data);
  a.table = block_table.ptr<int32_t>();
  a.lens = context_lens.ptr<int32_t>();
  a.cu = cu_seqlens_q.ptr<int32_t>();
  a.num_blocks = num_blocks;
  a.N = N;
  a.block_size = int(block_size);
  a.bs_shift = (block_size & (block_size - 1)) == 0 ? __builtin_ctzll(uint64_t(block_size)) : -1;
  a.max_blocks = int(max_blocks);
  a.B = int(B);
  a.Hq = int(Hq);
  a.Hkv = int(Hkv);
  a.group = int(Hq / Hkv);
  a.max_ctx = int(max_context_len);
  a.scale_log2 = scale * kLog2e;
  a.flags = ctx.flags;

  const plan::PagedSplit sp = split != nullptr ? *split : default_split(N, B, Hq, Hkv, D, max_context_len);
  DAPO_CHECK(sp.cluster == 1 || sp.cluster == 2 || sp.cluster == 4 || sp.cluster == 8,
             "paged_attention on CUDA: cluster of ", sp.cluster, " CTAs (1, 2, 4 or 8)");
  DAPO_CHECK(sp.qsplit >= 1 && sp.qsplit <= 64 && sp.groups >= 1, "paged_attention on CUDA: bad split");
  const plan::PagedPlan chosen = plan::paged_plan_of(N, Hq, D, max_context_len, sp);
  DAPO_CHECK(chosen.groups * chosen.csize <= (int64_t(1) << 30) && Hkv * chosen.qsplit <= 65535,
             "paged_attention on CUDA: Hkv = ", Hkv, " too large");
  a.part_len = int(chosen.part_len);
  a.num_parts = int(chosen.groups);
  a.csize = int(chosen.csize);
  a.qsplit = int(chosen.qsplit);

  DAPO_CHECK(ctx.scratch != nullptr || a.num_parts == 1, "paged_attention needs ctx.scratch");
  std::optional<ArenaScope> scope;
  if (a.num_parts > 1) {
    scope.emplace(*ctx.scratch);
    const size_t pr = size_t(N * Hq) * size_t(a.num_parts);
    a.part_m = ctx.scratch->alloc_array<float>(pr);
    a.part_l = ctx.scratch->alloc_array<float>(pr);
    a.part_acc = ctx.scratch->alloc_array<float>(pr * size_t(D));
  }
  const cudaStream_t stream = stream_of(ctx);
  switch (D) {
    case 16: launch_paged<16>(a, chosen.pdl, chosen.stages, stream); break;
    case 32: launch_paged<32>(a, chosen.pdl, chosen.stages, stream); break;
    case 64: launch_paged<64>(a, chosen.pdl, chosen.stages, stream); break;
    default: launch_paged<128>(a, chosen.pdl, chosen.stages, stream); break;
  }
}

}  // namespace

size_t paged_attention_scratch_bytes(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D,
                                     int64_t max_context_len) {
  if (N == 0 || Hq == 0) return 0;
  check_shapes_for_plan(N, B, Hq, Hkv, D, max_context_len);
  return plan::paged_plan_of(N, Hq, D, max_context_len, default_split(N, B, Hq, Hkv, D, max_context_len)).scratch;
}

void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table,
                     Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len, float scale) {
  if (ctx.batch_invariant)
    return detail::attention_paged_exact(ctx, out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q,
                                         scale);
  run_paged(ctx, out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q, max_context_len, scale, nullptr);
}

namespace detail {

PagedSplit paged_attention_split(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_context_len) {
  check_shapes_for_plan(N, B, Hq, Hkv, D, max_context_len);
  return default_split(N, B, Hq, Hkv, D, max_context_len);
}

void paged_attention_with_split(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache,
                                Tensor block_table, Tensor context_lens, Tensor cu_seqlens_q,
                                int64_t max_context_len, float scale, const PagedSplit& split) {
  // Tests and tuning reach this past ops::paged_attention: its checks here.
  DAPO_CHECK(ctx.backend == Backend::cuda, "paged_attention_with_split needs a CUDA context");
  ops::detail::check_devices(ctx, "paged_attention_with_split",
                             "out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q", out, q, k_cache,
                             v_cache, block_table, context_lens, cu_seqlens_q);
  ops::detail::check_paged_attention(out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q,
                                     max_context_len, scale);
  run_paged(ctx, out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q, max_context_len, scale, &split);
}

}  // namespace detail

}  // namespace dapo::ops::cuda
