// CUDA RMSNorm: fp32 statistics and math on bf16 (production) or f32
// storage; the kernels live in rmsnorm_kernels.cuh, shared with the fused
// residual_rmsnorm.
#include "dapo/ops/rmsnorm.h"
#include "norm/rmsnorm_kernels.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

using bf16_t = __nv_bfloat16;

}  // namespace

// The contract (dtypes, shapes, aliasing) is checked by ops::rmsnorm_forward.
void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) {
  const DType dt = in.dtype;
  const int64_t N = in.shape[0], C = in.shape[1];
  if (dt == DType::f32)
    norm::forward<float, false>(ctx, out.ptr<float>(), rstd.ptr<float>(), nullptr, in.ptr<float>(), nullptr,
                                weight.ptr<float>(), N, C, eps);
  else
    norm::forward<bf16_t, false>(ctx, static_cast<bf16_t*>(out.data), rstd.ptr<float>(), nullptr,
                                 static_cast<const bf16_t*>(in.data), nullptr,
                                 static_cast<const bf16_t*>(weight.data), N, C, eps);
}

void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in, Tensor weight,
                      Tensor rstd) {
  const DType dt = in.dtype;
  const int64_t N = in.shape[0], C = in.shape[1];
  if (dt == DType::f32)
    norm::backward<float, false>(ctx, din.ptr<float>(), dweight.ptr<float>(), dout.ptr<float>(), in.ptr<float>(),
                                 weight.ptr<float>(), rstd.ptr<float>(), N, C);
  else
    norm::backward<bf16_t, false>(ctx, static_cast<bf16_t*>(din.data), dweight.ptr<float>(),
                                  static_cast<const bf16_t*>(dout.data), static_cast<const bf16_t*>(in.data),
                                  static_cast<const bf16_t*>(weight.data), rstd.ptr<float>(), N, C);
}

}  // namespace dapo::ops::cuda
