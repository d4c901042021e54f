// CUDA dtype cast (include/dapo/ops/cast.h): f32 <-> bf16 in groups of 8
// elements (two 16-byte f32 accesses and one 16-byte bf16 access), element
// by element where the buffers are not 16-byte aligned, and a same-dtype
// copy as cudaMemcpyAsync on the stream.
#include <algorithm>

#include "common.cuh"
#include "dapo/ops/cast.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t pack2(float a, float b) { return bf16_bits(a) | (bf16_bits(b) << 16); }

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Groups [0, n8) of 8 vectorised when kAligned, the elements [8 * n8, n) one by one.
template <bool kAligned>
__global__ void __launch_bounds__(kThreads) f32_to_bf16_kernel(uint16_t* __restrict__ out, const float* __restrict__ in,
                                                               int64_t n, int64_t n8) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if constexpr (kAligned) {
    for (int64_t k = tid; k < n8; k += stride) {
      const float4 a = __ldcs(reinterpret_cast<const float4*>(in) + 2 * k);
      const float4 b = __ldcs(reinterpret_cast<const float4*>(in) + 2 * k + 1);
      reinterpret_cast<uint4*>(out)[k] = make_uint4(pack2(a.x, a.y), pack2(a.z, a.w), pack2(b.x, b.y), pack2(b.z, b.w));
    }
  }
  for (int64_t i = 8 * n8 + tid; i < n; i += stride) out[i] = uint16_t(bf16_bits(in[i]));
}

template <bool kAligned>
__global__ void __launch_bounds__(kThreads) bf16_to_f32_kernel(float* __restrict__ out, const uint16_t* __restrict__ in,
                                                               int64_t n, int64_t n8) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if constexpr (kAligned) {
    for (int64_t k = tid; k < n8; k += stride) {
      const uint4 q = __ldcs(reinterpret_cast<const uint4*>(in) + k);
      float4* o = reinterpret_cast<float4*>(out) + 2 * k;
      o[0] = make_float4(bf16_lo(q.x), bf16_hi(q.x), bf16_lo(q.y), bf16_hi(q.y));
      o[1] = make_float4(bf16_lo(q.z), bf16_hi(q.z), bf16_lo(q.w), bf16_hi(q.w));
    }
  }
  for (int64_t i = 8 * n8 + tid; i < n; i += stride) out[i] = __uint_as_float(uint32_t(in[i]) << 16);
}


template <class Out, class In, class Kernel>
void launch(const Ctx& ctx, Kernel aligned_kernel, Kernel scalar_kernel, Out* out, const In* in, int64_t n) {
  const bool vec = aligned16(out) && aligned16(in);
  const int64_t n8 = vec ? n / 8 : 0;
  const unsigned grid = grid_for(std::max<int64_t>(1, vec ? n8 : n), kThreads);
  (vec ? aligned_kernel : scalar_kernel)<<<grid, kThreads, 0, stream_of(ctx)>>>(out, in, n, n8);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace

// The contract (shapes, the supported pairs, aliasing) is checked by ops::cast.
void cast(const Ctx& ctx, Tensor out, Tensor in) {
  const int64_t n = in.numel();
  if (n == 0) return;
  if (out.dtype == in.dtype) {
    if (out.data == in.data) return;
    DAPO_CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, in.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    return;
  }
  if (in.dtype == DType::f32 && out.dtype == DType::bf16) {
    launch(ctx, f32_to_bf16_kernel<true>, f32_to_bf16_kernel<false>, static_cast<uint16_t*>(out.data),
           static_cast<const float*>(in.data), n);
  } else {
    launch(ctx, bf16_to_f32_kernel<true>, bf16_to_f32_kernel<false>, static_cast<float*>(out.data),
           static_cast<const uint16_t*>(in.data), n);
  }
}

}  // namespace dapo::ops::cuda
