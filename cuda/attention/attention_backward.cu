// CUDA attention backward over packed causal GQA sequences, deterministic:
// every output element is written by one CTA that sums in a fixed order,
// no float atomics. After the work tables, two launches:
//   prep: delta = rowsum(dout * out) in fp32 and lse * log2(e), (Hq, T) each;
//   one grid of two roles (attention_backward_kernel):
//   dK/dV: a CTA per (key block, kv head) loops over the query blocks from
//     its diagonal to the end of the sequence and, inside, over the query
//     heads of its group, accumulating dV += P^T dO and dK += dS^T Q in
//     registers (the group sum happens there, in a fixed order);
//   dQ: a CTA per (query block, query head) loops over the key blocks up to
//     the diagonal, dQ += dS K.
// Both roles recompute P = exp(scale q.k - lse) and dP = dO V^T on tensor
// cores (7 products' worth of work where a dQ by atomics would need 5: the
// price of determinism). The dK/dV role works in the transposed frame (keys
// as rows: S^T = K Q^T, dP^T = V dO^T) so that P^T and dS^T come out of the
// accumulators already as the A operands of the products into dV and dK.
#include "attention/attention_common.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using namespace cuda::detail::attn;

struct BwdParams {
  const bf16_t* q;      // (T, Hq, D)
  const bf16_t* k;      // (T, Hkv, D)
  const bf16_t* v;      // (T, Hkv, D)
  const bf16_t* dout;   // (T, Hq, D)
  const float* lse2;    // (Hq, T) lse * log2(e)
  const float* delta;   // (Hq, T) rowsum(dout * out)
  bf16_t* dq;           // (T, Hq, D)
  bf16_t* dk;           // (T, Hkv, D)
  bf16_t* dv;           // (T, Hkv, D)
  const int32_t* cu;    // (B+1)
  const int2* dq_tiles;  // (sequence, query block) of the dQ CTAs
  const int2* kv_tiles;  // (sequence, key block) of the dK/dV CTAs
  int64_t T;
  int Hq, Hkv, group;
  float scale, scale_log2;
};

// Eight lanes per (token, head) row (D / 8 when the row has fewer 16-byte
// chunks), 16-byte loads, a fixed-order shuffle sum.
template <int D>
constexpr int prep_lanes() {
  return D >= 64 ? 8 : D / 8;
}
// Threads of a prep CTA: whole warps, as the shuffle sum's full mask needs.
constexpr int kPrepThreads = 256;
static_assert(kPrepThreads % 32 == 0, "the prep kernel's shuffles take whole warps");
template <int D>
__global__ void attention_backward_prep_kernel(float* delta, float* lse2, const bf16_t* out, const bf16_t* dout,
                                               const float* lse, int64_t rows, int64_t T, int Hq) {
  constexpr int kLanes = prep_lanes<D>(), kShift = kLanes == 8 ? 3 : kLanes == 4 ? 2 : 1;
  constexpr int kChunks = D / (8 * kLanes);  // 16-byte chunks per lane
  static_assert(kLanes == 1 << kShift && kChunks * 8 * kLanes == D, "head dim");
  const int64_t gid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row = gid >> kShift;
  const int sub = int(gid & (kLanes - 1));
  float acc = 0.0f;
  if (row < rows) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t off = row * D + (sub + c * kLanes) * 8;
      const uint4 a = *reinterpret_cast<const uint4*>(out + off);
      const uint4 b = *reinterpret_cast<const uint4*>(dout + off);
      const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
      const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
        acc = fmaf(fa.x, fb.x, acc);
        acc = fmaf(fa.y, fb.y, acc);
      }
    }
  }
#pragma unroll
  for (int o = 1; o < kLanes; o *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (sub == 0 && row < rows) {
    const int64_t i = row / Hq, h = row % Hq;
    delta[h * T + i] = acc;
    lse2[h * T + i] = lse[h * T + i] * kLog2e;
  }
}

// Tile configurations. dQ: BM query rows per CTA, MT m-tiles of 16 rows per
// warp, BN keys per step. dK/dV: BN keys per CTA, MT m-tiles of 16 keys per
// warp, BM queries per step. FRAGS keeps the A fragments that do not change
// over the loop (Q, dO for dQ; K, V for dK/dV) in registers instead of
// re-reading them from shared memory.
template <int D_, int BM_, int BN_, int NW_, bool FRAGS_>
struct DqCfg {
  static constexpr int D = D_, BM = BM_, BN = BN_, NW = NW_, NT = kCtaThreads<NW_>, MT = BM_ / (16 * NW_);
  static constexpr bool FRAGS = FRAGS_;
  static constexpr int kSmem = (2 * BM + 4 * BN) * D * 2;
  static_assert(BM % (16 * NW) == 0 && BN % 16 == 0, "tile sizes");
};
template <int D_, int BN_, int BM_, int NW_, bool FRAGS_>
struct KvCfg {
  static constexpr int D = D_, BN = BN_, BM = BM_, NW = NW_, NT = kCtaThreads<NW_>, MT = BN_ / (16 * NW_);
  static constexpr bool FRAGS = FRAGS_;
  static constexpr int kSmem = (2 * BN + 4 * BM) * D * 2 + 4 * BM * 4;
  static_assert(BN % (16 * NW) == 0 && BM % 16 == 0 && 2 * BM <= NT, "tile sizes");
};

// dQ of query block p.dq_tiles[ti] of head h.
template <class C>
__device__ __forceinline__ void dq_block(const BwdParams& p, int h, int ti, unsigned char* smem) {
  constexpr int D = C::D, BM = C::BM, BN = C::BN, NT = C::NT, MT = C::MT;
  constexpr int NB = BN / 8, KC = D / 16, DB = D / 8;
  constexpr bool FR = C::FRAGS;
  constexpr uint32_t kTileBytes = BM * D * 2, kKvTileBytes = BN * D * 2;

  const int2 tile = p.dq_tiles[ti];
  if (tile.x < 0) return;
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem);
  const uint32_t sQa = smem_u32(smem), sdOa = sQa + kTileBytes, sKa = sdOa + kTileBytes,
                 sVa = sKa + 2 * kKvTileBytes;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = h / p.group;
  const int seq0 = p.cu[tile.x], len = p.cu[tile.x + 1] - seq0;
  const int m0 = tile.y * BM;
  const int q_rows = min(BM, len - m0);
  const int n_blocks = (min(m0 + BM, len) + BN - 1) / BN;
  const int64_t q_stride = int64_t(p.Hq) * D, kv_stride = int64_t(p.Hkv) * D;
  const bf16_t* kg = p.k + seq0 * kv_stride + g * D;
  const bf16_t* vg = p.v + seq0 * kv_stride + g * D;
  const int row_w = warp * MT * 16;

  load_tile<BM, D, NT>(sQa, p.q + (seq0 + m0) * q_stride + h * D, q_stride, q_rows, tid);
  load_tile<BM, D, NT>(sdOa, p.dout + (seq0 + m0) * q_stride + h * D, q_stride, q_rows, tid);
  load_tile<BN, D, NT>(sKa, kg, kv_stride, min(BN, len), tid);
  load_tile<BN, D, NT>(sVa, vg, kv_stride, min(BN, len), tid);
  cp_async_commit();

  // Rows past the sequence get lse = delta = 0: finite, and never stored.
  float lse2[MT][2], dlt[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_w + mt * 16 + (lane >> 2) + r * 8;
      const int64_t at = h * p.T + seq0 + m0 + row;
      lse2[mt][r] = row < q_rows ? p.lse2[at] : 0.0f;
      dlt[mt][r] = row < q_rows ? p.delta[at] : 0.0f;
    }

  float acc[MT][DB][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][db][e] = 0.0f;
  uint32_t qf[FR ? MT : 1][FR ? KC : 1][4], of[FR ? MT : 1][FR ? KC : 1][4];

  for (int n = 0; n < n_blocks; ++n) {
    const int stage = n & 1;
    if (n + 1 < n_blocks) {
      const int n1 = (n + 1) * BN;
      load_tile<BN, D, NT>(sKa + (stage ^ 1) * kKvTileBytes, kg + n1 * kv_stride, kv_stride, min(BN, len - n1), tid);
      load_tile<BN, D, NT>(sVa + (stage ^ 1) * kKvTileBytes, vg + n1 * kv_stride, kv_stride, min(BN, len - n1), tid);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (FR) {
      if (n == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kc = 0; kc < KC; ++kc) {
            load_a<D>(qf[mt][kc], sQa, row_w + mt * 16, kc, lane);
            load_a<D>(of[mt][kc], sdOa, row_w + mt * 16, kc, lane);
          }
      }
    }
    const uint32_t sK = sKa + stage * kKvTileBytes, sV = sVa + stage * kKvTileBytes;

    // S = Q K^T and dP = dO V^T.
    float s[MT][NB][4], dp[MT][NB][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nb][e] = dp[mt][nb][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      uint32_t a[MT][4], ao[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (FR) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            a[mt][e] = qf[mt][kc][e];
            ao[mt][e] = of[mt][kc][e];
          }
        } else {
          load_a<D>(a[mt], sQa, row_w + mt * 16, kc, lane);
          load_a<D>(ao[mt], sdOa, row_w + mt * 16, kc, lane);
        }
      }
#pragma unroll
      for (int nb2 = 0; nb2 < NB / 2; ++nb2) {
        uint32_t b[4];
        load_b<D>(b, sK, nb2 * 16, kc, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][2 * nb2], a[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * nb2 + 1], a[mt], b[2], b[3]);
        }
        load_b<D>(b, sV, nb2 * 16, kc, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(dp[mt][2 * nb2], ao[mt], b[0], b[1]);
          mma_bf16(dp[mt][2 * nb2 + 1], ao[mt], b[2], b[3]);
        }
      }
    }

    // dS = P (dP - delta), P = 2^(s scale log2e - lse log2e), causal mask.
    const int n0 = n * BN;
    const bool diagonal = n0 + BN - 1 > m0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          float pe = exp2_approx(fmaf(s[mt][nb][e], p.scale_log2, -lse2[mt][r]));
          if (diagonal) {
            const int row = m0 + row_w + mt * 16 + (lane >> 2) + r * 8;
            const int col = n0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            if (col > row) pe = 0.0f;
          }
          s[mt][nb][e] = pe * (dp[mt][nb][e] - dlt[mt][r]);
        }

    // dQ += dS K.
#pragma unroll
    for (int kc = 0; kc < NB / 2; ++kc) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_to_a(a[mt], s[mt][2 * kc], s[mt][2 * kc + 1]);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t b[4];
        load_b_trans<D>(b, sK, kc * 16, np, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(acc[mt][2 * np], a[mt], b[0], b[1]);
          mma_bf16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][db][e] *= p.scale;
    stage_rows<D>(sQ, row_w + mt * 16, acc[mt], lane);  // the warp's own rows: no other warp reads them
  }
  __syncthreads();
  store_tile<BM, D, NT>(p.dq + (seq0 + m0) * q_stride + h * D, q_stride, sQ, q_rows, tid);
}

// dK, dV of key block p.kv_tiles[ti] of kv head g; the steps run over
// (query block, head of the group), heads inner.
template <class C>
__device__ __forceinline__ void dkdv_block(const BwdParams& p, int g, int ti, unsigned char* smem) {
  constexpr int D = C::D, BN = C::BN, BM = C::BM, NT = C::NT, MT = C::MT;
  constexpr int NQ = BM / 8, KC = D / 16, DB = D / 8;
  constexpr bool FR = C::FRAGS;
  constexpr uint32_t kKvTileBytes = BN * D * 2, kTileBytes = BM * D * 2;

  const int2 tile = p.kv_tiles[ti];
  if (tile.x < 0) return;
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem);
  bf16_t* sV = reinterpret_cast<bf16_t*>(smem + kKvTileBytes);
  const uint32_t sKa = smem_u32(smem), sVa = sKa + kKvTileBytes, sQa = sVa + kKvTileBytes,
                 sdOa = sQa + 2 * kTileBytes, sLa = sdOa + 2 * kTileBytes, sDa = sLa + 2 * BM * 4;
  const float* sL = reinterpret_cast<const float*>(smem + 2 * kKvTileBytes + 4 * kTileBytes);
  const float* sDl = sL + 2 * BM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq0 = p.cu[tile.x], len = p.cu[tile.x + 1] - seq0;
  const int n0 = tile.y * BN;
  const int k_rows = min(BN, len - n0);
  const int m_first = n0 / BM, m_count = (len + BM - 1) / BM - m_first;
  const int steps = m_count * p.group;
  const int64_t q_stride = int64_t(p.Hq) * D, kv_stride = int64_t(p.Hkv) * D;
  const int row_w = warp * MT * 16;

  // Step i: query block m_first + i / group, head g * group + i % group.
  auto load_step = [&](int i, int stage) {
    const int m0 = (m_first + i / p.group) * BM, h = g * p.group + i % p.group;
    const int rows = min(BM, len - m0);
    const int64_t at = (seq0 + m0) * q_stride + h * D;
    load_tile<BM, D, NT>(sQa + stage * kTileBytes, p.q + at, q_stride, rows, tid);
    load_tile<BM, D, NT>(sdOa + stage * kTileBytes, p.dout + at, q_stride, rows, tid);
    if (tid < 2 * BM) {  // lse and delta of the block's rows; zeros past the sequence
      const int r = tid % BM;
      const float* base = tid < BM ? p.lse2 : p.delta;
      cp_async_4((tid < BM ? sLa : sDa) + (stage * BM + r) * 4, r < rows ? base + h * p.T + seq0 + m0 + r : base,
                 r < rows);
    }
  };

  load_tile<BN, D, NT>(sKa, p.k + (seq0 + n0) * kv_stride + g * D, kv_stride, k_rows, tid);
  load_tile<BN, D, NT>(sVa, p.v + (seq0 + n0) * kv_stride + g * D, kv_stride, k_rows, tid);
  load_step(0, 0);
  cp_async_commit();

  float dk[MT][DB][4], dv[MT][DB][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mt][db][e] = dv[mt][db][e] = 0.0f;
  uint32_t kf[FR ? MT : 1][FR ? KC : 1][4], vf[FR ? MT : 1][FR ? KC : 1][4];

  for (int i = 0; i < steps; ++i) {
    const int stage = i & 1;
    if (i + 1 < steps) load_step(i + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (FR) {
      if (i == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kc = 0; kc < KC; ++kc) {
            load_a<D>(kf[mt][kc], sKa, row_w + mt * 16, kc, lane);
            load_a<D>(vf[mt][kc], sVa, row_w + mt * 16, kc, lane);
          }
      }
    }
    const int m0 = (m_first + i / p.group) * BM;
    const uint32_t sQ = sQa + stage * kTileBytes, sdO = sdOa + stage * kTileBytes;
    const float* lse2 = sL + stage * BM;
    const float* dlt = sDl + stage * BM;

    // S^T = K Q^T and dP^T = V dO^T (keys as rows).
    float s[MT][NQ][4], dp[MT][NQ][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nq = 0; nq < NQ; ++nq)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nq][e] = dp[mt][nq][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      uint32_t a[MT][4], av[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (FR) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            a[mt][e] = kf[mt][kc][e];
            av[mt][e] = vf[mt][kc][e];
          }
        } else {
          load_a<D>(a[mt], sKa, row_w + mt * 16, kc, lane);
          load_a<D>(av[mt], sVa, row_w + mt * 16, kc, lane);
        }
      }
#pragma unroll
      for (int nq2 = 0; nq2 < NQ / 2; ++nq2) {
        uint32_t b[4];
        load_b<D>(b, sQ, nq2 * 16, kc, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][2 * nq2], a[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * nq2 + 1], a[mt], b[2], b[3]);
        }
        load_b<D>(b, sdO, nq2 * 16, kc, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(dp[mt][2 * nq2], av[mt], b[0], b[1]);
          mma_bf16(dp[mt][2 * nq2 + 1], av[mt], b[2], b[3]);
        }
      }
    }

    // P^T and dS^T = P^T (dP^T - delta); zero where the query precedes the
    // key or lies past the sequence.
    const bool masked = m0 < n0 + BN - 1 || m0 + BM > len;
#pragma unroll
    for (int nq = 0; nq < NQ; ++nq)
#pragma unroll
      for (int e1 = 0; e1 < 2; ++e1) {
        const int c = nq * 8 + (lane & 3) * 2 + e1;
        const float l2 = lse2[c], dl = dlt[c];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int e = 2 * r + e1;
            float pe = exp2_approx(fmaf(s[mt][nq][e], p.scale_log2, -l2));
            if (masked) {
              const int key = n0 + row_w + mt * 16 + (lane >> 2) + r * 8, query = m0 + c;
              if (query < key || query >= len) pe = 0.0f;
            }
            dp[mt][nq][e] = pe * (dp[mt][nq][e] - dl);
            s[mt][nq][e] = pe;
          }
      }

    // dV += P^T dO and dK += dS^T Q.
#pragma unroll
    for (int kc = 0; kc < NQ / 2; ++kc) {
      uint32_t a[MT][4], ad[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        c_to_a(a[mt], s[mt][2 * kc], s[mt][2 * kc + 1]);
        c_to_a(ad[mt], dp[mt][2 * kc], dp[mt][2 * kc + 1]);
      }
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t b[4];
        load_b_trans<D>(b, sdO, kc * 16, np, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(dv[mt][2 * np], a[mt], b[0], b[1]);
          mma_bf16(dv[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
        load_b_trans<D>(b, sQ, kc * 16, np, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(dk[mt][2 * np], ad[mt], b[0], b[1]);
          mma_bf16(dk[mt][2 * np + 1], ad[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();
  }

  // The warp's own rows of sK and sV: no other warp reads them.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mt][db][e] *= p.scale;
    stage_rows<D>(sK, row_w + mt * 16, dk[mt], lane);
    stage_rows<D>(sV, row_w + mt * 16, dv[mt], lane);
  }
  __syncthreads();
  const int64_t at = (seq0 + n0) * kv_stride + g * D;
  store_tile<BN, D, NT>(p.dk + at, kv_stride, sK, k_rows, tid);
  store_tile<BN, D, NT>(p.dv + at, kv_stride, sV, k_rows, tid);
}

// dK/dV and dQ in one grid: the first n_kv_ctas CTAs take the key blocks
// (heaviest first), the rest the query blocks (heaviest first). The causal
// dK/dV blocks are uneven - the first key block of a sequence is seen by
// every query of its group's heads - and with one kernel each their tail
// left SMs idle; here dQ work fills them (4 x 4096 tokens: 3.3 -> 2.5 ms).
template <class Q, class K, int MIN_BLOCKS>
__global__ void __launch_bounds__(Q::NT, MIN_BLOCKS) attention_backward_kernel(const BwdParams p, int n_kv_ctas) {
  static_assert(Q::NT == K::NT, "one block size for both roles");
  extern __shared__ __align__(128) unsigned char smem[];
  const int b = int(blockIdx.x);
  if (b < n_kv_ctas)
    dkdv_block<K>(p, b % p.Hkv, b / p.Hkv, smem);
  else
    dq_block<Q>(p, (b - n_kv_ctas) % p.Hq, (b - n_kv_ctas) / p.Hq, smem);
}

template <class Q, class K, int MIN_BLOCKS>
cudaError_t launch_backward(const BwdParams& p, int n_dq, int n_kv, cudaStream_t stream) {
  constexpr int kSmem = Q::kSmem > K::kSmem ? Q::kSmem : K::kSmem;
  auto kernel = attention_backward_kernel<Q, K, MIN_BLOCKS>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const int n_kv_ctas = n_kv * p.Hkv;
  kernel<<<unsigned(n_kv_ctas + n_dq * p.Hq), Q::NT, kSmem, stream>>>(p, n_kv_ctas);
  return cudaGetLastError();
}

// The configurations in use, measured on an H100 SXM against one or two
// m-tiles per warp, 4 or 8 warps, 32/64/128-row steps and separate kernels:
// dQ with two m-tiles per warp (each K/V fragment read from shared memory
// feeds two products), dK/dV with 64 keys per CTA and 64 queries a step,
// two CTAs of 4 warps per SM.
using DqCfg64 = DqCfg<64, 128, 64, 4, false>;
using KvCfg64 = KvCfg<64, 64, 64, 4, true>;
using DqCfg128 = DqCfg<128, 128, 32, 4, false>;
using KvCfg128 = KvCfg<128, 64, 64, 4, false>;
// D = 32 and 16 (small test and demo models, not tuned): D = 64's tiles.
using DqCfg32 = DqCfg<32, 128, 64, 4, false>;
using KvCfg32 = KvCfg<32, 64, 64, 4, true>;
using DqCfg16 = DqCfg<16, 128, 64, 4, false>;
using KvCfg16 = KvCfg<16, 64, 64, 4, true>;
static_assert(DqCfg64::BM == DqCfg128::BM && DqCfg64::BM == DqCfg32::BM && DqCfg64::BM == DqCfg16::BM &&
                  KvCfg64::BN == KvCfg128::BN && KvCfg64::BN == KvCfg32::BN && KvCfg64::BN == KvCfg16::BN,
              "one table block size per role");
constexpr int kDqBlock = DqCfg64::BM, kKvBlock = KvCfg64::BN;

template <int D>
void launch_prep(float* delta, float* lse2, const bf16_t* out, const bf16_t* dout, const float* lse, int64_t rows,
                 int64_t T, int Hq, cudaStream_t stream) {
  const unsigned blocks = unsigned((rows * prep_lanes<D>() + kPrepThreads - 1) / kPrepThreads);
  attention_backward_prep_kernel<D><<<blocks, kPrepThreads, 0, stream>>>(delta, lse2, out, dout, lse, rows, T, Hq);
}

}  // namespace

void attention_backward(const Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                        Tensor out, Tensor lse, Tensor cu_seqlens, int64_t max_seqlen, float scale) {
  // The contract is checked by ops::attention_backward; here the kernels' limits.
  const char* op = "attention_backward";
  const Dims d = check_kernel_limits(op, q, k, cu_seqlens);
  check_aligned(op, {{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}, {&dout, "dout"}, {&q, "q"}, {&k, "k"}, {&v, "v"},
                     {&out, "out"}});
  if (d.T == 0 || d.Hq == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "attention_backward needs ctx.scratch");

  const cudaStream_t stream = stream_of(ctx);
  ArenaScope scope(*ctx.scratch);
  float* delta = ctx.scratch->alloc_array<float>(size_t(d.Hq * d.T));
  float* lse2 = ctx.scratch->alloc_array<float>(size_t(d.Hq * d.T));
  const int n_dq = tile_table_entries(d.T, d.B, kDqBlock), n_kv = tile_table_entries(d.T, d.B, kKvBlock);
  int2* dq_tiles = ctx.scratch->alloc_array<int2>(size_t(n_dq));
  int2* kv_tiles = ctx.scratch->alloc_array<int2>(size_t(n_kv));
  const int32_t* cu = cu_seqlens.ptr<int32_t>();
  DAPO_CUDA_CHECK(launch_build_tile_table(dq_tiles, cu, int(d.B), int(d.T), kDqBlock, n_dq, /*last_first=*/true, stream));
  DAPO_CUDA_CHECK(launch_build_tile_table(kv_tiles, cu, int(d.B), int(d.T), kKvBlock, n_kv, /*last_first=*/false, stream));

  const int64_t rows = d.T * d.Hq;
  const auto* out_p = static_cast<const bf16_t*>(out.data);
  const auto* dout_p = static_cast<const bf16_t*>(dout.data);
  switch (d.D) {
    case 16: launch_prep<16>(delta, lse2, out_p, dout_p, lse.ptr<float>(), rows, d.T, int(d.Hq), stream); break;
    case 32: launch_prep<32>(delta, lse2, out_p, dout_p, lse.ptr<float>(), rows, d.T, int(d.Hq), stream); break;
    case 64: launch_prep<64>(delta, lse2, out_p, dout_p, lse.ptr<float>(), rows, d.T, int(d.Hq), stream); break;
    default: launch_prep<128>(delta, lse2, out_p, dout_p, lse.ptr<float>(), rows, d.T, int(d.Hq), stream); break;
  }
  DAPO_CUDA_CHECK_LAUNCH();

  BwdParams p{};
  p.q = static_cast<const bf16_t*>(q.data);
  p.k = static_cast<const bf16_t*>(k.data);
  p.v = static_cast<const bf16_t*>(v.data);
  p.dout = dout_p;
  p.lse2 = lse2;
  p.delta = delta;
  p.dq = static_cast<bf16_t*>(dq.data);
  p.dk = static_cast<bf16_t*>(dk.data);
  p.dv = static_cast<bf16_t*>(dv.data);
  p.cu = cu;
  p.T = d.T;
  p.Hq = int(d.Hq);
  p.Hkv = int(d.Hkv);
  p.group = int(d.group);
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  p.kv_tiles = kv_tiles;
  p.dq_tiles = dq_tiles;
  switch (d.D) {
    case 16: DAPO_CUDA_CHECK((launch_backward<DqCfg16, KvCfg16, 2>(p, n_dq, n_kv, stream))); break;
    case 32: DAPO_CUDA_CHECK((launch_backward<DqCfg32, KvCfg32, 2>(p, n_dq, n_kv, stream))); break;
    case 64: DAPO_CUDA_CHECK((launch_backward<DqCfg64, KvCfg64, 2>(p, n_dq, n_kv, stream))); break;
    default: DAPO_CUDA_CHECK((launch_backward<DqCfg128, KvCfg128, 2>(p, n_dq, n_kv, stream))); break;
  }
}

}  // namespace dapo::ops::cuda
