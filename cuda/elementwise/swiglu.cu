// CUDA SwiGLU: out = silu(gate) * up, elementwise, fp32 math on f32 or bf16
// storage. Memory-bound: one grid-stride pass of 16-byte accesses, no
// shared memory.
#include "common.cuh"
#include "dapo/ops/swiglu.h"
#include "ptx/pack.cuh"
#include "ptx/pdl.cuh"
#include "gemm/swiglu_math.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

// Threads per CTA of both kernels: a grid-stride loop, so any count works; 256 keeps
// enough warps in flight per SM for a memory-bound pass.
constexpr int kThreads = 256;

// K elements per access: 16-byte packs (8 bf16, 4 f32) when every pointer is
// 16-byte aligned, else K = 1. Elements past the last whole pack (n % K)
// go one per thread in the same launch.
template <class T, int K>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  pdl_wait();  // launched as a programmatic dependent (pdl.cuh)
  pdl_launch_dependents();
  const int64_t packs = n / K;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < packs; i += stride) {
    const Pack<T, K> g = load_pack<T, K>(gate + i * K), u = load_pack<T, K>(up + i * K);
    Pack<T, K> o;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float gv = widen(g.v[k]);
      const float s = swiglu_sigmoid(gv);
      o.v[k] = narrow<T>(gv * s * widen(u.v[k]));
    }
    store_pack(out + i * K, o);
  }
  for (int64_t i = packs * K + first; i < n; i += stride) {
    const float g = load_f32(gate, i);
    const float s = swiglu_sigmoid(g);
    store_f32(out, i, g * s * load_f32(up, i));
  }
}

template <class T, int K>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  const int64_t packs = n / K;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < packs; i += stride) {
    const Pack<T, K> g = load_pack<T, K>(gate + i * K), u = load_pack<T, K>(up + i * K);
    const Pack<T, K> d = load_pack<T, K>(dout + i * K);
    Pack<T, K> dg, du;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float gv = widen(g.v[k]), uv = widen(u.v[k]), dv = widen(d.v[k]);
      const float s = swiglu_sigmoid(gv);
      dg.v[k] = narrow<T>(dv * uv * s * (1.0f + gv * (1.0f - s)));
      du.v[k] = narrow<T>(dv * gv * s);
    }
    store_pack(dgate + i * K, dg);
    store_pack(dup + i * K, du);
  }
  for (int64_t i = packs * K + first; i < n; i += stride) {
    const float g = load_f32(gate, i), u = load_f32(up, i), d = load_f32(dout, i);
    const float s = swiglu_sigmoid(g);
    store_f32(dgate, i, d * u * s * (1.0f + g * (1.0f - s)));
    store_f32(dup, i, d * g * s);
  }
}

bool all_aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

// Launchers: raw pointers, size, stream; return the launch status.
template <class T>
cudaError_t launch_swiglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int K = kWidePack<T>;
  if (all_aligned16({out, gate, up}))
    return launch_pdl(swiglu_forward_kernel<T, K>, grid_for(n / K + 1, kThreads), kThreads, 0, stream, out, gate, up, n);
  return launch_pdl(swiglu_forward_kernel<T, 1>, grid_for(n, kThreads), kThreads, 0, stream, out, gate, up, n);
}

template <class T>
cudaError_t launch_swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                                   cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int K = kWidePack<T>;
  if (all_aligned16({dgate, dup, dout, gate, up}))
    swiglu_backward_kernel<T, K><<<grid_for(n / K + 1, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, n);
  else
    swiglu_backward_kernel<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, n);
  return cudaGetLastError();
}

}  // namespace

// Shapes and dtypes (all one, f32 or bf16) are checked by ops::swiglu_forward / swiglu_backward.
void swiglu_forward(const Ctx& ctx, Tensor out, Tensor gate, Tensor up) {
  const int64_t n = out.numel();
  if (out.dtype == DType::f32)
    DAPO_CUDA_CHECK(launch_swiglu_forward(out.ptr<float>(), gate.ptr<float>(), up.ptr<float>(), n, stream_of(ctx)));
  else
    DAPO_CUDA_CHECK(launch_swiglu_forward(static_cast<__nv_bfloat16*>(out.data),
                                          static_cast<const __nv_bfloat16*>(gate.data),
                                          static_cast<const __nv_bfloat16*>(up.data), n, stream_of(ctx)));
}

void swiglu_backward(const Ctx& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) {
  const int64_t n = dout.numel();
  if (dout.dtype == DType::f32)
    DAPO_CUDA_CHECK(launch_swiglu_backward(dgate.ptr<float>(), dup.ptr<float>(), dout.ptr<float>(),
                                           gate.ptr<float>(), up.ptr<float>(), n, stream_of(ctx)));
  else
    DAPO_CUDA_CHECK(launch_swiglu_backward(
        static_cast<__nv_bfloat16*>(dgate.data), static_cast<__nv_bfloat16*>(dup.data),
        static_cast<const __nv_bfloat16*>(dout.data), static_cast<const __nv_bfloat16*>(gate.data),
        static_cast<const __nv_bfloat16*>(up.data), n, stream_of(ctx)));
}

}  // namespace dapo::ops::cuda
