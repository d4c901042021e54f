// CUDA residual add + RMSNorm: one pass over a, b (sum and out written) in
// the forward, dsum read-add-written once in the backward; kernels shared
// with rmsnorm.cu (rmsnorm_kernels.cuh).
#include "dapo/ops/rmsnorm.h"
#include "norm/rmsnorm_kernels.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

using bf16_t = __nv_bfloat16;

}  // namespace

// The contract (dtypes, shapes, aliasing) is checked by ops::residual_rmsnorm_forward / _backward.
void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps) {
  const DType dt = a.dtype;
  const int64_t N = a.shape[0], C = a.shape[1];
  if (dt == DType::f32)
    norm::forward<float, true>(ctx, out.ptr<float>(), rstd.ptr<float>(), sum.ptr<float>(), a.ptr<float>(),
                               b.ptr<float>(), weight.ptr<float>(), N, C, eps);
  else
    norm::forward<bf16_t, true>(ctx, static_cast<bf16_t*>(out.data), rstd.ptr<float>(),
                                static_cast<bf16_t*>(sum.data), static_cast<const bf16_t*>(a.data),
                                static_cast<const bf16_t*>(b.data), static_cast<const bf16_t*>(weight.data), N, C,
                                eps);
}

void residual_rmsnorm_backward(const Ctx& ctx, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum, Tensor weight,
                               Tensor rstd) {
  const DType dt = sum.dtype;
  const int64_t N = sum.shape[0], C = sum.shape[1];
  if (dt == DType::f32)
    norm::backward<float, true>(ctx, dsum.ptr<float>(), dweight.ptr<float>(), dout.ptr<float>(), sum.ptr<float>(),
                                weight.ptr<float>(), rstd.ptr<float>(), N, C);
  else
    norm::backward<bf16_t, true>(ctx, static_cast<bf16_t*>(dsum.data), dweight.ptr<float>(),
                                 static_cast<const bf16_t*>(dout.data), static_cast<const bf16_t*>(sum.data),
                                 static_cast<const bf16_t*>(weight.data), rstd.ptr<float>(), N, C);
}

}  // namespace dapo::ops::cuda
