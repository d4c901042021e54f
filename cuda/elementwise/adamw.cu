// CUDA AdamW step (include/dapo/ops/adamw.h): one memory-bound pass that
// reads param, grad, exp_avg, exp_avg_sq, writes the three states back and,
// when asked, the bf16 compute copy of the updated param (llm.c style: the
// copy costs 2 bytes per element here instead of a separate 6-byte cast).
// The arithmetic is the CPU op's, operation by operation, with explicit
// round-to-nearest intrinsics so that nvcc fuses nothing into an FMA.
#include <algorithm>

#include "common.cuh"
#include "dapo/ops/adamw.h"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using ops::detail::AdamWScalars;

constexpr int kThreads = 256;

// One element: updates m, v and returns the new param.
__device__ __forceinline__ float adamw_element(float w, float g, float& m, float& v, const AdamWScalars& s) {
  const float gi = __fmul_rn(g, s.scale);
  m = __fadd_rn(__fmul_rn(s.b1, m), __fmul_rn(s.one_m_b1, gi));
  v = __fadd_rn(__fmul_rn(s.b2, v), __fmul_rn(__fmul_rn(s.one_m_b2, gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bc2_sqrt), s.eps);
  return __fsub_rn(__fmul_rn(w, s.decay), __fdiv_rn(__fmul_rn(s.step_size, m), denom));
}

// Elements [0, 4 * n4) as float4 (every pointer 16-byte aligned, the bf16
// copy 8-byte aligned), then [4 * n4, n) one by one. wb may be null.
__global__ void __launch_bounds__(kThreads) adamw_kernel(float* __restrict__ w, const float* __restrict__ g,
                                                         float* __restrict__ m, float* __restrict__ v,
                                                         __nv_bfloat16* __restrict__ wb, int64_t n, int64_t n4,
                                                         AdamWScalars s) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t i = tid; i < n4; i += stride) {
    float4 wi = reinterpret_cast<const float4*>(w)[i];
    const float4 gi = __ldcs(reinterpret_cast<const float4*>(g) + i);
    float4 mi = reinterpret_cast<const float4*>(m)[i];
    float4 vi = reinterpret_cast<const float4*>(v)[i];
    wi.x = adamw_element(wi.x, gi.x, mi.x, vi.x, s);
    wi.y = adamw_element(wi.y, gi.y, mi.y, vi.y, s);
    wi.z = adamw_element(wi.z, gi.z, mi.z, vi.z, s);
    wi.w = adamw_element(wi.w, gi.w, mi.w, vi.w, s);
    reinterpret_cast<float4*>(w)[i] = wi;
    reinterpret_cast<float4*>(m)[i] = mi;
    reinterpret_cast<float4*>(v)[i] = vi;
    if (wb)
      reinterpret_cast<uint2*>(wb)[i] =
          make_uint2(bf16_bits(wi.x) | (bf16_bits(wi.y) << 16), bf16_bits(wi.z) | (bf16_bits(wi.w) << 16));
  }
  for (int64_t i = 4 * n4 + tid; i < n; i += stride) {
    float mi = m[i], vi = v[i];
    const float wi = adamw_element(w[i], g[i], mi, vi, s);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
    if (wb) wb[i] = __ushort_as_bfloat16(uint16_t(bf16_bits(wi)));
  }
}

bool aligned(const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

}  // namespace

void adamw_step(const Ctx& ctx, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_bf16,
                const AdamWParams& p) {
  const int64_t n = param.numel();
  if (n == 0) return;
  float* w = param.ptr<float>();
  const float* g = grad.ptr<float>();
  float* m = exp_avg.ptr<float>();
  float* v = exp_avg_sq.ptr<float>();
  auto* wb = param_bf16.defined() ? static_cast<__nv_bfloat16*>(param_bf16.data) : nullptr;
  const bool vec = aligned(w, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16) && (!wb || aligned(wb, 8));
  const int64_t n4 = vec ? n / 4 : 0;
  // Enough resident threads to cover memory latency; each loops grid-stride.
  const unsigned grid = grid_for(std::max<int64_t>(1, vec ? n4 : n), kThreads);
  adamw_kernel<<<grid, kThreads, 0, stream_of(ctx)>>>(w, g, m, v, wb, n, n4, ops::detail::adamw_scalars(p));
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda
