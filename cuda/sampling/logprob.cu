// CUDA log-prob + entropy (include/dapo/ops/logprob.h): logits f32 or bf16,
// fp32 math, the CPU op's formulas with every sum taken relative to a max.
//
// Rows are long (up to 151,936 logits), so a row is cut into fixed chunks of
// kThreads * kUnroll 16-byte vectors (16384 bf16 or 8192 f32) and each
// (row, chunk) is one CTA: thousands of equal CTAs keep every SM busy to the
// end for any N, where one CTA per row would leave a tail wave. A CTA holds
// its whole chunk in registers, so it reads the logits once even when it
// needs both the chunk's max and the sums relative to it. The chunk results
// go to ctx.scratch and a per-row finish kernel merges them in chunk order,
// in double: chunk boundaries depend only on V and the dtype, every
// reduction has a fixed order, so the same inputs give the same bits.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common.cuh"
#include "dapo/ops/logprob.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 8;  // 16-byte vectors per thread per chunk, all loaded before the first use
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -INFINITY;

template <class T> constexpr int kVec = 16 / int(sizeof(T));  // elements per 16-byte vector
template <class T> constexpr int64_t kChunk = int64_t(kThreads) * kUnroll * kVec<T>;

// The raw bits of element j of a 16-byte vector of T, widened to fp32 (exact).
template <class T>
__device__ __forceinline__ float vec_get(const uint4& r, int j) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&r);
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w[j]);
  } else {
    const uint32_t word = w[j >> 1];
    return __uint_as_float((j & 1) ? (word & 0xffff0000u) : (word << 16));
  }
}

template <class T>
__device__ __forceinline__ uint32_t element_bits(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 4) return __float_as_uint(p[i]);
  else return uint32_t(__bfloat16_as_ushort(p[i]));
}

// A -inf vector: what lies past the end of a row (adds nothing to any sum).
template <class T>
__device__ __forceinline__ uint4 neg_inf_vec() {
  const uint32_t w = sizeof(T) == 4 ? 0xff800000u : 0xff80ff80u;
  return make_uint4(w, w, w, w);
}

// First element of vector u of this thread in the chunk that starts at c0.
__device__ __forceinline__ int64_t vec_start(int64_t c0, int u, int vec) {
  return c0 + (int64_t(u) * kThreads + threadIdx.x) * vec;
}

// Loads this thread's kUnroll vectors of the chunk [c0, c0 + kChunk) of a
// row of V elements; elements at or past V read as -inf. kAligned: the row
// is 16-byte aligned and V a multiple of the vector, so a vector is either
// all in or all out and one 128-bit load fetches it. kReadOnly: the kernel
// writes no logits, so the non-coherent (read-only) path may cache them.
template <class T, bool kAligned, bool kReadOnly>
__device__ __forceinline__ void load_chunk(uint4 (&r)[kUnroll], const T* row, int64_t c0, int64_t V) {
  constexpr int vec = kVec<T>;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t e = vec_start(c0, u, vec);
    if constexpr (kAligned) {
      const uint4* src = reinterpret_cast<const uint4*>(row + e);
      if (e < V) r[u] = kReadOnly ? __ldg(src) : *src;
      else r[u] = neg_inf_vec<T>();
    } else {
      uint32_t* w = reinterpret_cast<uint32_t*>(&r[u]);
      const uint32_t neg = sizeof(T) == 4 ? 0xff800000u : 0xff80u;
#pragma unroll
      for (int j = 0; j < vec; ++j) {
        const uint32_t bits = e + j < V ? element_bits(row, e + j) : neg;
        if constexpr (sizeof(T) == 4) w[j] = bits;
        else if (j & 1) w[j >> 1] |= bits << 16;
        else w[j >> 1] = bits;
      }
    }
  }
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Block reductions in a fixed tree (xor butterflies, then warp 0 over the
// warps' results): the same bits on every run. The butterfly leaves the same
// value in every lane because a + b == b + a bit for bit.
__device__ __forceinline__ float block_max_all(float v, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  v = smem[threadIdx.x & (kWarps - 1)];
#pragma unroll
  for (int o = kWarps / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;  // every thread: the block's max
}

// Sums of a and b over the block, valid in thread 0.
__device__ __forceinline__ void block_sum2(float& a, float& b, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if ((threadIdx.x & 31) == 0) {
    smem[threadIdx.x >> 5] = a;
    smem[kWarps + (threadIdx.x >> 5)] = b;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    a = threadIdx.x < kWarps ? smem[threadIdx.x] : 0.0f;
    b = threadIdx.x < kWarps ? smem[kWarps + threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = kWarps / 2; o > 0; o >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, o);
      b += __shfl_xor_sync(0xffffffffu, b, o);
    }
  }
}

// What a chunk CTA computes:
//   max    - the chunk's max of z (pass 1);
//   sums   - s0, s1 relative to the given row max (pass 2);
//   online - the chunk's max m_c and s0, s1 relative to it (single shard).
enum class ChunkPass { max, sums, online };

// partial: (N, nchunks, 3) = (m, s0, s1) per chunk (max: m only).
template <class T, ChunkPass kPass, bool kAligned>
__global__ void __launch_bounds__(kThreads) logits_chunk_kernel(const T* __restrict__ logits, int64_t V,
                                                                  int nchunks, float inv_t,
                                                                  const float* __restrict__ row_max,
                                                                  float* __restrict__ partial) {
  __shared__ float smem[2 * kWarps];
  const int64_t row = blockIdx.x / nchunks;
  const int64_t c0 = int64_t(blockIdx.x % nchunks) * kChunk<T>;
  uint4 r[kUnroll];
  load_chunk<T, kAligned, true>(r, logits + row * V, c0, V);

  float m;
  if constexpr (kPass == ChunkPass::sums) {
    m = row_max[row];
  } else {
    float xmax = kNegInf;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kVec<T>; ++j) xmax = fmaxf(xmax, vec_get<T>(r[u], j));
    // max(x) * inv_t == max(x * inv_t) bit for bit: rounding is monotonic
    // and inv_t > 0. So the max is exactly the largest z used below.
    m = __fmul_rn(block_max_all(xmax, smem), inv_t);
    if constexpr (kPass == ChunkPass::max) {
      if (threadIdx.x == 0) partial[int64_t(blockIdx.x) * 3] = m;
      return;
    }
    __syncthreads();  // smem is reused by the sums
  }

  float s0 = 0.0f, s1 = 0.0f;
  // A chunk whose logits are all -inf adds nothing (and -inf - -inf is NaN).
  if (m != kNegInf) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kVec<T>; ++j) {
        const float d = __fmul_rn(vec_get<T>(r[u], j), inv_t) - m;
        const float e = fast_exp2(d * kLog2e);
        s0 += e;
        s1 = fmaf(e, fmaxf(d, -FLT_MAX), s1);  // a -inf logit adds 0 * -FLT_MAX, never 0 * -inf
      }
  }
  block_sum2(s0, s1, smem);
  if (threadIdx.x == 0) {
    float* p = partial + int64_t(blockIdx.x) * 3;
    p[0] = m;
    p[1] = s0;
    p[2] = s1;
  }
}

// Pass 1 finish: row_max = max over chunks. NaN / +inf is a broken forward;
// -inf alone may be a shard with nothing but masked logits (pass 3 judges
// the global max).
__global__ void row_max_finish_kernel(float* __restrict__ row_max, const float* __restrict__ partial, int64_t N,
                                      int nchunks, DeviceFlags* flags) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  float m = kNegInf;
  for (int c = 0; c < nchunks; ++c) m = fmaxf(m, partial[(n * nchunks + c) * 3]);
  row_max[n] = m;
  if (isnan(m) || m == INFINITY) flag_non_finite(flags, FlagSite::logprob, n);
}

// Pass 2 finish: chunk sums added in chunk order (double), the target term.
template <class T>
__global__ void partial_sums_finish_kernel(float* __restrict__ sums, const float* __restrict__ partial,
                                           const T* __restrict__ logits, const int32_t* __restrict__ targets,
                                           const float* __restrict__ row_max, int64_t N, int64_t V, int nchunks,
                                           int64_t vocab_start, float inv_t, DeviceFlags* flags) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  double s0 = 0, s1 = 0;
  for (int c = 0; c < nchunks; ++c) {
    const float* p = partial + (n * nchunks + c) * 3;
    s0 += p[1];
    s1 += p[2];
  }
  const int64_t t = targets[n];
  if (t < 0) flag_bad_id(flags, FlagSite::logprob, n, t);
  const int64_t local = t - vocab_start;
  const float m = row_max[n];
  sums[n * 3 + 0] = float(s0);
  sums[n * 3 + 1] = float(s1);
  sums[n * 3 + 2] = (t >= 0 && local >= 0 && local < V) ? __fmul_rn(load_f32(logits, n * V + local), inv_t) - m : 0.0f;
}

// The CPU's finishing formulas (double) from a row's max and its sums.
struct RowResult {
  float logprob, entropy, lse;
};
__device__ __forceinline__ RowResult finish_row(float m, double s0, double s1, double s2) {
  const double log_s0 = log(s0);
  return {float(s2 - log_s0), float(log_s0 - s1 / s0), float(double(m) + log_s0)};
}

__device__ __forceinline__ bool row_is_finite(float m, double s0, double s1) {
  return isfinite(m) && isfinite(s0) && isfinite(s1);
}

// Pass 3: per row, from the all-reduced sums and global max.
__global__ void logprob_entropy_finish_kernel(float* __restrict__ logprob, float* __restrict__ entropy,
                                              float* __restrict__ lse, const float* __restrict__ sums,
                                              const float* __restrict__ row_max, int64_t N, DeviceFlags* flags) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const double s0 = sums[n * 3 + 0], s1 = sums[n * 3 + 1], s2 = sums[n * 3 + 2];
  const float m = row_max[n];
  if (!row_is_finite(m, s0, s1)) flag_non_finite(flags, FlagSite::logprob, n);
  const RowResult r = finish_row(m, s0, s1, s2);
  logprob[n] = r.logprob;
  entropy[n] = r.entropy;
  lse[n] = r.lse;
}

// Single-shard finish: merges the chunks' (m_c, s0_c, s1_c) in chunk order
// onto the row max M (sum e^(z-M) (z-M) = a (s1_c + (m_c - M) s0_c) with
// a = e^(m_c - M)), then the target's logit.
template <class T>
__global__ void forward_finish_kernel(float* __restrict__ logprob, float* __restrict__ entropy,
                                      float* __restrict__ lse, const float* __restrict__ partial,
                                      const T* __restrict__ logits, const int32_t* __restrict__ targets, int64_t N,
                                      int64_t V, int nchunks, int64_t vocab_start, float inv_t, DeviceFlags* flags) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const float* p = partial + n * nchunks * 3;
  float M = kNegInf;
  for (int c = 0; c < nchunks; ++c) M = fmaxf(M, p[c * 3]);
  double s0 = 0, s1 = 0;
  for (int c = 0; c < nchunks; ++c) {
    const float c_s0 = p[c * 3 + 1];
    if (c_s0 == 0.0f) continue;  // an all -inf chunk; NaN falls through and shows
    const double shift = double(p[c * 3]) - double(M);
    const double a = exp(shift);
    s0 += a * c_s0;
    s1 += a * (double(p[c * 3 + 2]) + shift * c_s0);
  }
  if (!row_is_finite(M, s0, s1)) flag_non_finite(flags, FlagSite::logprob, n);
  const int64_t t = targets[n];
  const int64_t local = t - vocab_start;
  float zt = NAN;  // a target outside the shard: flagged, and its logprob NaN
  if (t < 0 || local < 0 || local >= V) flag_bad_id(flags, FlagSite::logprob, n, t);
  else zt = __fmul_rn(load_f32(logits, n * V + local), inv_t) - M;
  const RowResult r = finish_row(M, s0, s1, zt);
  logprob[n] = r.logprob;
  entropy[n] = r.entropy;
  lse[n] = r.lse;
}

// dlogits = inv_t * (dlogprob * (onehot - p) - dentropy * p * (log p + H)),
// elementwise over the same (row, chunk) grid, stored as TO (the logits' T,
// or bf16 from f32 logits: the trainer's fp32 head feeds a bf16 GEMM).
// Each thread loads its elements before it stores any, so dlogits may be
// logits itself when TO is T.
template <class T, class TO, bool kAligned>
__global__ void __launch_bounds__(kThreads) logprob_backward_kernel(
    TO* dlogits, const T* logits, int64_t V, int nchunks, const int32_t* __restrict__ targets,
    const float* __restrict__ lse, const float* __restrict__ entropy, const float* __restrict__ dlogprob,
    const float* __restrict__ dentropy, int64_t vocab_start, float inv_t, DeviceFlags* flags) {
  constexpr int vec = kVec<T>;
  const int64_t row = blockIdx.x / nchunks;
  const int chunk = blockIdx.x % nchunks;
  const int64_t c0 = int64_t(chunk) * kChunk<T>;
  uint4 r[kUnroll];
  load_chunk<T, kAligned, false>(r, logits + row * V, c0, V);
  TO* drow = dlogits + row * V;
  const float l = lse[row], H = entropy[row];
  const float g_lp = dlogprob ? dlogprob[row] : 0.0f;
  const float g_ent = dentropy ? dentropy[row] : 0.0f;
  const int64_t t = targets[row];
  if (t < 0 && chunk == 0 && threadIdx.x == 0) flag_bad_id(flags, FlagSite::logprob, row, t);
  const int64_t local = t < 0 ? -1 : t - vocab_start;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t e = vec_start(c0, u, vec);
    if (e >= V) break;  // later vectors of this thread lie further on
    const int64_t rel64 = local - e;  // the target's place in this vector, if it is there
    const int rel = rel64 >= 0 && rel64 < vec ? int(rel64) : -1;
    float d[vec];
#pragma unroll
    for (int j = 0; j < vec; ++j) {
      const float logp = __fmul_rn(vec_get<T>(r[u], j), inv_t) - l;
      const float p = fast_exp2(logp * kLog2e);
      const float ent_term = p > 0.0f ? p * (logp + H) : 0.0f;  // p log p -> 0, never 0 * -inf
      d[j] = inv_t * (-g_lp * p - g_ent * ent_term);
      if (j == rel) d[j] += inv_t * g_lp;
    }
    if constexpr (kAligned) {
      // vec outputs of TO: 16 bytes, or 8 for bf16 from f32.
      uint32_t w[vec * sizeof(TO) / 4];
#pragma unroll
      for (int j = 0; j < vec; ++j) {
        if constexpr (sizeof(TO) == 4) {
          w[j] = __float_as_uint(d[j]);
        } else {
          const uint32_t b = uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(d[j])));
          if (j & 1) w[j >> 1] |= b << 16;
          else w[j >> 1] = b;
        }
      }
      if constexpr (sizeof(w) == 16) *reinterpret_cast<uint4*>(drow + e) = make_uint4(w[0], w[1], w[2], w[3]);
      else *reinterpret_cast<uint2*>(drow + e) = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
      for (int j = 0; j < vec; ++j) {
        if (e + j >= V) break;
        store_f32(drow, e + j, d[j]);
      }
    }
  }
}

// ---- host side ----

template <class T>
int chunks_of(int64_t V) {
  return int((V + kChunk<T> - 1) / kChunk<T>);
}

template <class T>
unsigned chunk_grid(int64_t N, int nchunks) {
  const int64_t blocks = N * nchunks;
  DAPO_CHECK(blocks < (int64_t(1) << 31), "logprob: ", N, " rows of ", nchunks, " chunks exceed one launch");
  return unsigned(blocks);
}

constexpr int kFinishThreads = 128;
unsigned finish_grid(int64_t N) { return unsigned((N + kFinishThreads - 1) / kFinishThreads); }

template <class T, ChunkPass kPass>
void launch_chunks(const Ctx& ctx, const T* logits, int64_t N, int64_t V, float inv_t, const float* row_max,
                   float* partial) {
  const int nchunks = chunks_of<T>(V);
  if (N == 0 || nchunks == 0) return;
  const unsigned grid = chunk_grid<T>(N, nchunks);
  if (aligned16(logits) && V % kVec<T> == 0)
    logits_chunk_kernel<T, kPass, true><<<grid, kThreads, 0, stream_of(ctx)>>>(logits, V, nchunks, inv_t, row_max, partial);
  else
    logits_chunk_kernel<T, kPass, false><<<grid, kThreads, 0, stream_of(ctx)>>>(logits, V, nchunks, inv_t, row_max, partial);
  DAPO_CUDA_CHECK_LAUNCH();
}

// Scratch for the chunk results: (N, nchunks, 3) f32.
float* alloc_partial(const Ctx& ctx, int64_t N, int nchunks) {
  DAPO_CHECK(ctx.scratch != nullptr, "logprob needs ctx.scratch");
  return ctx.scratch->alloc_array<float>(size_t(std::max<int64_t>(1, N * nchunks * 3)));
}

// Calls f(ptr) with the logits' typed pointer.
template <class F>
void with_logits(const Tensor& logits, F&& f) {
  if (logits.dtype == DType::f32) f(static_cast<const float*>(logits.data));
  else f(static_cast<const __nv_bfloat16*>(logits.data));
}

}  // namespace

// The contracts (dtypes, shapes, inv_temperature, vocab_start) are checked by the ops:: functions.
void logits_row_max(const Ctx& ctx, Tensor row_max, Tensor logits, float inv_temperature) {
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0) return;
  ArenaScope scope(*ctx.scratch);
  with_logits(logits, [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    const int nchunks = chunks_of<T>(V);
    float* partial = alloc_partial(ctx, N, nchunks);
    launch_chunks<T, ChunkPass::max>(ctx, x, N, V, inv_temperature, nullptr, partial);
    row_max_finish_kernel<<<finish_grid(N), kFinishThreads, 0, stream_of(ctx)>>>(row_max.ptr<float>(), partial, N,
                                                                                  nchunks, ctx.flags);
    DAPO_CUDA_CHECK_LAUNCH();
  });
}

void logits_partial_sums(const Ctx& ctx, Tensor sums, Tensor logits, Tensor targets, Tensor row_max,
                         int64_t vocab_start, float inv_temperature) {
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0) return;
  ArenaScope scope(*ctx.scratch);
  with_logits(logits, [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    const int nchunks = chunks_of<T>(V);
    float* partial = alloc_partial(ctx, N, nchunks);
    launch_chunks<T, ChunkPass::sums>(ctx, x, N, V, inv_temperature, row_max.ptr<float>(), partial);
    partial_sums_finish_kernel<T><<<finish_grid(N), kFinishThreads, 0, stream_of(ctx)>>>(
        sums.ptr<float>(), partial, x, targets.ptr<int32_t>(), row_max.ptr<float>(), N, V, nchunks, vocab_start,
        inv_temperature, ctx.flags);
    DAPO_CUDA_CHECK_LAUNCH();
  });
}

void logprob_entropy_finish(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor sums,
                            Tensor row_max) {
  const int64_t N = row_max.size(0);
  if (N == 0) return;
  logprob_entropy_finish_kernel<<<finish_grid(N), kFinishThreads, 0, stream_of(ctx)>>>(
      logprob.ptr<float>(), entropy.ptr<float>(), lse.ptr<float>(), sums.ptr<float>(), row_max.ptr<float>(), N,
      ctx.flags);
  DAPO_CUDA_CHECK_LAUNCH();
}

void logprob_entropy_forward(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor logits,
                             Tensor targets, int64_t vocab_start, float inv_temperature) {
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0) return;
  ArenaScope scope(*ctx.scratch);
  with_logits(logits, [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    const int nchunks = chunks_of<T>(V);
    float* partial = alloc_partial(ctx, N, nchunks);
    launch_chunks<T, ChunkPass::online>(ctx, x, N, V, inv_temperature, nullptr, partial);
    forward_finish_kernel<T><<<finish_grid(N), kFinishThreads, 0, stream_of(ctx)>>>(
        logprob.ptr<float>(), entropy.ptr<float>(), lse.ptr<float>(), partial, x, targets.ptr<int32_t>(), N, V,
        nchunks, vocab_start, inv_temperature, ctx.flags);
    DAPO_CUDA_CHECK_LAUNCH();
  });
}

void logprob_entropy_backward(const Ctx& ctx, Tensor dlogits, Tensor dlogprob, Tensor dentropy,
                              Tensor logits, Tensor targets, Tensor lse, Tensor entropy,
                              int64_t vocab_start, float inv_temperature) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* glp = dlogprob.defined() ? dlogprob.ptr<float>() : nullptr;
  const float* gent = dentropy.defined() ? dentropy.ptr<float>() : nullptr;
  with_logits(logits, [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    const int nchunks = chunks_of<T>(V);
    if (N == 0 || nchunks == 0) return;
    const unsigned grid = chunk_grid<T>(N, nchunks);
    auto launch = [&](auto* dx) {
      using TO = std::remove_pointer_t<decltype(dx)>;
      const bool aligned = aligned16(x) && aligned16(dx) && V % kVec<T> == 0;
      if (aligned)
        logprob_backward_kernel<T, TO, true><<<grid, kThreads, 0, stream_of(ctx)>>>(
            dx, x, V, nchunks, targets.ptr<int32_t>(), lse.ptr<float>(), entropy.ptr<float>(), glp, gent,
            vocab_start, inv_temperature, ctx.flags);
      else
        logprob_backward_kernel<T, TO, false><<<grid, kThreads, 0, stream_of(ctx)>>>(
            dx, x, V, nchunks, targets.ptr<int32_t>(), lse.ptr<float>(), entropy.ptr<float>(), glp, gent,
            vocab_start, inv_temperature, ctx.flags);
      DAPO_CUDA_CHECK_LAUNCH();
    };
    if (dlogits.dtype == logits.dtype) launch(static_cast<T*>(dlogits.data));
    else launch(static_cast<__nv_bfloat16*>(dlogits.data));  // from f32 logits (the op's contract)
  });
}

}  // namespace dapo::ops::cuda
