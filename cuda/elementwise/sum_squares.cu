// CUDA sum of squares (include/dapo/ops/sum_squares.h): deterministic,
// accumulated in double. The buffer is cut into at most kMaxChunks chunks
// whose size depends only on N; one CTA sums a chunk (each thread its groups
// of 4 elements in ascending order, then a fixed tree over the threads) into
// a double in ctx.scratch, and one more CTA adds the chunk sums in chunk
// order. Same N and values, same bits, run after run.
#include <algorithm>

#include "common.cuh"
#include "dapo/ops/sum_squares.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;            // groups loaded before the first is summed
constexpr int64_t kMaxChunks = 4096;  // several CTAs per SM for a whole wave or more
constexpr int64_t kMinChunk = 65536;  // elements; small buffers take one CTA

// Sum over the block in a fixed tree; valid in thread 0.
__device__ __forceinline__ double block_sum(double v, double* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kWarps ? smem[threadIdx.x] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

__device__ __forceinline__ double squares(const float4& q) {
  double s = double(q.x) * double(q.x);
  s += double(q.y) * double(q.y);
  s += double(q.z) * double(q.z);
  s += double(q.w) * double(q.w);
  return s;
}

// Group k of 4 elements of x[0, len): one 16-byte load when the buffer is
// aligned and the group whole, else element by element (missing ones 0).
// Either way the same 4 values in the same order, so the result does not
// depend on the alignment.
template <bool kAligned>
__device__ __forceinline__ float4 load_group(const float* x, int64_t k, int64_t len) {
  const int64_t i = 4 * k;
  if (kAligned && i + 4 <= len) return __ldcs(reinterpret_cast<const float4*>(x + i));
  float4 q;
  q.x = i + 0 < len ? x[i + 0] : 0.0f;
  q.y = i + 1 < len ? x[i + 1] : 0.0f;
  q.z = i + 2 < len ? x[i + 2] : 0.0f;
  q.w = i + 3 < len ? x[i + 3] : 0.0f;
  return q;
}

template <bool kAligned>
__global__ void __launch_bounds__(kThreads) chunk_sum_squares_kernel(const float* __restrict__ x, int64_t n,
                                                                     int64_t chunk, double* __restrict__ partial) {
  __shared__ double smem[kWarps];
  const int64_t begin = int64_t(blockIdx.x) * chunk;
  const int64_t len = std::min(chunk, n - begin);
  const int64_t groups = (len + 3) / 4;
  const float* xc = x + begin;
  double acc = 0.0;
  int64_t k = threadIdx.x;
  for (; k + (kUnroll - 1) * kThreads < groups; k += kUnroll * kThreads) {
    float4 q[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) q[u] = load_group<kAligned>(xc, k + u * kThreads, len);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += squares(q[u]);
  }
  for (; k < groups; k += kThreads) acc += squares(load_group<kAligned>(xc, k, len));
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kThreads) finish_kernel(float* __restrict__ out, const double* __restrict__ partial,
                                                          int64_t nchunks) {
  __shared__ double smem[kWarps];
  double acc = 0.0;
  for (int64_t c = threadIdx.x; c < nchunks; c += kThreads) acc += partial[c];
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) out[0] = float(acc);
}

}  // namespace

// The contract (out (1) f32, x f32) is checked by ops::sum_squares.
void sum_squares(const Ctx& ctx, Tensor out, Tensor x) {
  const int64_t n = x.numel();
  if (n == 0) {
    DAPO_CUDA_CHECK(cudaMemsetAsync(out.data, 0, sizeof(float), stream_of(ctx)));
    return;
  }
  DAPO_CHECK(ctx.scratch != nullptr, "sum_squares needs ctx.scratch");
  // A multiple of 4 keeps every chunk's groups 16-byte aligned when x is.
  const int64_t chunk = std::max(kMinChunk, ((n + kMaxChunks - 1) / kMaxChunks + 3) / 4 * 4);
  const int64_t nchunks = (n + chunk - 1) / chunk;
  ArenaScope scope(*ctx.scratch);
  double* partial = ctx.scratch->alloc_array<double>(size_t(nchunks));
  const float* xs = x.ptr<float>();
  if ((reinterpret_cast<uintptr_t>(xs) & 15) == 0)
    chunk_sum_squares_kernel<true><<<unsigned(nchunks), kThreads, 0, stream_of(ctx)>>>(xs, n, chunk, partial);
  else
    chunk_sum_squares_kernel<false><<<unsigned(nchunks), kThreads, 0, stream_of(ctx)>>>(xs, n, chunk, partial);
  DAPO_CUDA_CHECK_LAUNCH();
  finish_kernel<<<1, kThreads, 0, stream_of(ctx)>>>(out.ptr<float>(), partial, nchunks);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda
