// Backend dispatch of the fused residual add + RMSNorm.
#include "dapo/ops/residual_rmsnorm.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps) {
  DAPO_DISPATCH(ctx, residual_rmsnorm_forward, sum, out, rstd, a, b, weight, eps);
}

void residual_rmsnorm_backward(const Ctx& ctx, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum,
                               Tensor weight, Tensor rstd) {
  DAPO_DISPATCH(ctx, residual_rmsnorm_backward, dsum, dweight, dout, sum, weight, rstd);
}

}  // namespace dapo::ops
