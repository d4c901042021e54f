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
// device's CTA slots only (make_plan), and every reduction has a fixed
// order: bit-identical reruns and a launch sequence a CUDA graph can
// capture (the perf test runs it captured).
//
// Multi-token queries (prefill, chunked prefill) run through the same kernel
// as tiles of 8 (token, head) rows with causal masking per row, the tiles of
// a sequence spread over `qsplit` CTAs; correct, not tuned.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "common.cuh"
#include "dapo/core/arena.h"
#include "dapo/ops/kv_cache.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;
using bf16_t = __nv_bfloat16;

constexpr int kRows = 8;  // query rows (token, head) per tile: the MMA's N
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// CTAs per SM the register budget is cut for: D 64 at 4 (128 registers, 20
// bytes spilled outside the key loop; on an H100 about 4% faster than 3 at
// batch 128 x 4k, up to 7% slower at batch 8-32), the others at 3 (at most
// 168 registers, no spills).
template <int D>
constexpr int kMinBlocks = D == 64 ? 4 : 3;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int64_t kMaxPartialBytes = int64_t(64) << 20;

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
  int part_len, num_parts, qsplit, max_ctx;
  float scale_log2;  // scale * log2(e): scores in log2 units, exp2 in the softmax
};

// Whether sequence b's metadata is consistent; malformed sequences are
// skipped by both kernels alike (the CPU op diagnoses them).
__device__ __forceinline__ bool sequence_ok(const PagedArgs& a, int b, int& len, int& q0, int& nq) {
  len = a.lens[b];
  q0 = a.cu[b];
  nq = a.cu[b + 1] - q0;
  return len >= 0 && len <= a.max_ctx && int64_t(len) <= int64_t(a.max_blocks) * a.block_size && nq >= 0 &&
         nq <= len && q0 >= 0 && int64_t(q0) + nq <= a.N;
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

template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) paged_attention_kernel(const PagedArgs a) {
  using G = Geo<D>;
  __shared__ float s_acc[kWarps][kRows][D + 2];
  __shared__ float s_m[kWarps][kRows], s_l[kWarps][kRows];

  // The merge kernel (a programmatic dependent) may be set up now; it
  // waits for this grid's completion before reading anything.
  asm volatile("griddepcontrol.launch_dependents;\n");
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
    return (blk < 0 || blk >= a.num_blocks) ? -1 : blk * a.block_size + off;
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
  if (!sequence_ok(a, b, len, q0, nq)) return;
  if (s0 >= len) return;  // this sequence has fewer partitions; the merge reads only its own
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
      // Online softmax; the max of a row is warp-uniform (butterfly over the
      // 8 lanes that share it), the sums stay per lane until the end.
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int kt = 0; kt < G::KT; ++kt) mx = fmaxf(mx, fmaxf(s[kt][r], s[kt][r + 2]));
#pragma unroll
        for (int o = 4; o < 32; o *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m[r], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key yet: weights 0, no NaN
        alpha[r] = exp2f(m[r] - m_use);
        m[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int kt = 0; kt < G::KT; ++kt) {
          s[kt][r] = exp2f(s[kt][r] - m_use);
          s[kt][r + 2] = exp2f(s[kt][r + 2] - m_use);
          sum += s[kt][r] + s[kt][r + 2];
        }
        l[r] = l[r] * alpha[r] + sum;
      }
#pragma unroll
      for (int t2 = 0; t2 < G::KS; ++t2) {
        acc[t2][0] *= alpha[0];
        acc[t2][1] *= alpha[1];
        acc[t2][2] *= alpha[0];
        acc[t2][3] *= alpha[1];
      }
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
    __syncthreads();
    for (int e = threadIdx.x; e < kRows * D / 2; e += kThreads) {
      const int r = e / (D / 2), d = 2 * (e % (D / 2)), row = t * kRows + r;
      if (row >= rows_total) continue;
      float mm = s_m[0][r];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) mm = fmaxf(mm, s_m[w][r]);
      const float mu = mm == -INFINITY ? 0.0f : mm;
      float ll = 0.0f, o0 = 0.0f, o1 = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float sc = exp2f(s_m[w][r] - mu);
        ll = fmaf(s_l[w][r], sc, ll);
        o0 = fmaf(s_acc[w][r][d], sc, o0);
        o1 = fmaf(s_acc[w][r][d + 1], sc, o1);
      }
      const int i = row / a.group, h = g * a.group + row % a.group;
      const int64_t orow = int64_t(q0 + i) * a.Hq + h;
      if (a.part_acc == nullptr) {
        const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;  // a row whose every key is masked: zeros
        *reinterpret_cast<__nv_bfloat162*>(a.out + orow * D + d) = __floats2bfloat162_rn(o0 * inv, o1 * inv);
      } else {
        const int64_t pr = orow * a.num_parts + part;
        *reinterpret_cast<float2*>(a.part_acc + pr * D + d) = make_float2(o0, o1);
        if (d == 0) {
          a.part_m[pr] = mm;
          a.part_l[pr] = ll;
        }
      }
    }
    __syncthreads();  // s_acc, s_m, s_l are reused by the next tile
  }
}

// One warp per output row (token, head): combines the partitions that hold
// keys the row sees, in partition order (the max and the weight sum by a
// fixed butterfly over lanes holding 32 partitions each).
template <int D>
__global__ void __launch_bounds__(kThreads) paged_attention_merge_kernel(const PagedArgs a) {
  constexpr int E = D >= 64 ? D / 32 : 2;  // output dims per lane (lanes past D idle)
  // Launched as a programmatic dependent of the main kernel: wait for its
  // completion and the visibility of its partials.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
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
  const int np = min(pos / a.part_len + 1, a.num_parts);
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

struct Plan {
  int64_t part_len = 0, num_parts = 1, qsplit = 1;
  size_t scratch = 0;  // bytes of ctx.scratch the split needs (0: none)
};

template <int D>
const void* kernel_of() {
  return reinterpret_cast<const void*>(&paged_attention_kernel<D>);
}

// CTAs of the main kernel the device holds at once.
int64_t resident_ctas(int64_t D) {
  int device = 0, sms = 0, per_sm = 0;
  DAPO_CUDA_CHECK(cudaGetDevice(&device));
  DAPO_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const void* k = D == 16   ? kernel_of<16>()
                      : D == 32 ? kernel_of<32>()
                      : D == 64 ? kernel_of<64>()
                                : kernel_of<128>();
  DAPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, 0));
  return int64_t(std::max(sms, 1)) * std::max(per_sm, 1);
}

int64_t unit_of(int64_t D) { return D == 16 ? Geo<16>::unit : D == 32 ? Geo<32>::unit : D == 64 ? Geo<64>::unit : Geo<128>::unit; }

// The split: partitions of part_len keys (a multiple of the CTA's step).
// A small time model picks the partition count among ~90 candidates: waves
// of CTAs over the device's CTA slots, the CTAs of a wave sharing a
// bandwidth that saturates with their number (one CTA alone is latency
// bound: a few KB in flight per warp), a fixed cost per CTA, plus the
// merge's launch and partial traffic when split. Host values only (shapes,
// max_context_len, the device's CTA slots): the same call gives the same
// split, so reruns give the same bits and a CUDA graph can capture it.
Plan make_plan(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_ctx, int64_t resident) {
  // Fitted to partition-count sweeps on an H100 SXM (3.0 TB/s copy), 11
  // decode shapes of the three Qwen2.5 sizes, batch 8-128, 512-32k
  // positions: n CTAs streaming together reach kBandwidth * (1 - exp(-n *
  // kCtaRate / kBandwidth)), and each CTA costs kCtaBytes more than its keys
  // (its start: metadata, table and first loads in series; its end: the
  // warp merge and the partial writes).
  constexpr double kBandwidth = 3.0e6;  // bytes per microsecond
  constexpr double kCtaRate = 1.5e4;    // bytes per microsecond one CTA reaches alone
  constexpr double kCtaBytes = 1.28e5;  // a CTA's fixed cost, in streamed bytes
  constexpr double kWaveUs = 1.0;
  constexpr double kMergeUs = 3.0;      // the merge kernel, besides its partial traffic
  Plan plan;
  const int64_t group = Hq / Hkv, unit = unit_of(D), rows = N * Hq;
  // Query tiles of one sequence over several CTAs: decode batches (one row
  // tile per sequence when every sequence has one token) use one.
  const int64_t tiles = (std::min(N, max_ctx) * group + kRows - 1) / kRows;
  plan.qsplit = N == B ? 1 : std::clamp<int64_t>(tiles, 1, 64);
  const int64_t items = B * Hkv * plan.qsplit;
  const double key_bytes = 4.0 * double(D);  // K and V of one key of one KV head
  const int64_t max_units = (max_ctx + unit - 1) / unit;
  auto time_of = [&](int64_t len, int64_t parts, int64_t partial_bytes) {
    const int64_t ctas = items * parts, full = ctas / resident, rest = ctas % resident;
    const double cta_bytes = double(len) * key_bytes + kCtaBytes;
    auto wave = [&](int64_t n) {
      return double(n) * cta_bytes / (kBandwidth * -std::expm1(-double(n) * kCtaRate / kBandwidth)) + kWaveUs;
    };
    double time = double(full) * wave(resident);
    if (rest > 0) time += wave(rest);
    if (parts > 1) time += kMergeUs + 2.0 * double(partial_bytes) / kBandwidth;
    return time;
  };
  // Candidate partition counts: 1..16, then steps of 1/8, and those that
  // fill 1..4 waves of CTA slots exactly.
  int64_t cand[96];
  int nc = 0;
  for (int64_t p = 1; p <= 16; ++p) cand[nc++] = p;
  for (int64_t p = 18; nc < 88; p += p / 8) cand[nc++] = p;
  for (int64_t w = 1; w <= 4; ++w) cand[nc++] = std::max<int64_t>(1, w * resident / items);
  double best = 0.0;
  for (int c = 0; c < nc; ++c) {
    const int64_t want = std::min(cand[c], max_units);
    const int64_t len = (max_units + want - 1) / want * unit;
    const int64_t parts = (max_ctx + len - 1) / len;
    const int64_t partial_bytes = parts > 1 ? rows * parts * (D + 2) * 4 : 0;
    if (partial_bytes > kMaxPartialBytes) continue;
    const double time = time_of(len, parts, partial_bytes);
    if (plan.part_len == 0 || time < best || (time == best && parts < plan.num_parts)) {
      best = time;
      plan.part_len = len;
      plan.num_parts = parts;
    }
  }
  if (plan.num_parts > 1) {
    const size_t pr = size_t(rows) * size_t(plan.num_parts);
    plan.scratch = (pr * 2 + pr * size_t(D)) * sizeof(float) + 3 * Arena::kAlign;
  }
  return plan;
}

template <int D>
void launch_paged(const PagedArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned(a.num_parts), unsigned(a.Hkv * a.qsplit), unsigned(a.B));
  paged_attention_kernel<D><<<grid, kThreads, 0, stream>>>(a);
  DAPO_CUDA_CHECK_LAUNCH();
  if (a.part_acc != nullptr) {
    // A programmatic dependent launch: the merge grid is set up while the
    // main grid's last CTAs run and waits (griddepcontrol.wait) for its
    // results, instead of paying a full launch gap after it.
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned((a.N * a.Hq + kWarps - 1) / kWarps));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    DAPO_CUDA_CHECK(cudaLaunchKernelEx(&cfg, paged_attention_merge_kernel<D>, a));
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

}  // namespace

size_t paged_attention_scratch_bytes(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D,
                                     int64_t max_context_len) {
  if (N == 0 || Hq == 0) return 0;
  check_shapes_for_plan(N, B, Hq, Hkv, D, max_context_len);
  return make_plan(N, B, Hq, Hkv, D, max_context_len, resident_ctas(D)).scratch;
}

void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table,
                     Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len, float scale) {
  DAPO_CHECK_DTYPE(k_cache, DType::bf16);
  DAPO_CHECK_DTYPE(v_cache, DType::bf16);
  DAPO_CHECK(k_cache.ndim == 4, "paged_attention: k_cache ", k_cache.shape_string(),
             " must be (num_blocks, block_size, Hkv, D)");
  DAPO_CHECK(v_cache.same_shape(k_cache), "paged_attention: v_cache ", v_cache.shape_string(), " vs k_cache ",
             k_cache.shape_string());
  DAPO_CHECK(k_cache.shape[1] > 0 && k_cache.shape[2] > 0, "paged_attention: empty cache geometry ",
             k_cache.shape_string());
  DAPO_CHECK_DTYPE(out, DType::bf16);
  DAPO_CHECK_DTYPE(q, DType::bf16);
  DAPO_CHECK_DTYPE(block_table, DType::i32);
  DAPO_CHECK_DTYPE(context_lens, DType::i32);
  DAPO_CHECK_DTYPE(cu_seqlens_q, DType::i32);
  DAPO_CHECK(q.ndim == 3, "paged_attention: q ", q.shape_string(), " must be (N, Hq, D)");
  const int64_t N = q.shape[0], Hq = q.shape[1], num_blocks = k_cache.shape[0], block_size = k_cache.shape[1];
  const int64_t Hkv = k_cache.shape[2], D = k_cache.shape[3];
  DAPO_CHECK(q.shape[2] == D, "paged_attention: q ", q.shape_string(), " vs cache head dim ", D);
  DAPO_CHECK(Hq % Hkv == 0, "paged_attention: Hq = ", Hq, " is not a multiple of Hkv = ", Hkv);
  DAPO_CHECK_SHAPE(out, {N, Hq, D});
  DAPO_CHECK(block_table.ndim == 2, "paged_attention: block_table ", block_table.shape_string(),
             " must be (B, max_blocks)");
  const int64_t B = block_table.shape[0], max_blocks = block_table.shape[1];
  DAPO_CHECK_SHAPE(context_lens, {B});
  DAPO_CHECK_SHAPE(cu_seqlens_q, {B + 1});
  for (const Tensor* t : {&k_cache, &v_cache, &out, &q, &block_table, &context_lens, &cu_seqlens_q})
    check_device(ctx, *t, "paged_attention tensor");
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

  const Plan plan = make_plan(N, B, Hq, Hkv, D, max_context_len, resident_ctas(D));
  a.part_len = int(plan.part_len);
  a.num_parts = int(plan.num_parts);
  a.qsplit = int(plan.qsplit);
  DAPO_CHECK(Hkv * a.qsplit <= 65535, "paged_attention on CUDA: Hkv = ", Hkv, " too large");

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
    case 16: launch_paged<16>(a, stream); break;
    case 32: launch_paged<32>(a, stream); break;
    case 64: launch_paged<64>(a, stream); break;
    default: launch_paged<128>(a, stream); break;
  }
}

}  // namespace dapo::ops::cuda
