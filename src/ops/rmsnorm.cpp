// Backend dispatch of RMSNorm.
#include "dapo/ops/rmsnorm.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) {
  DAPO_DISPATCH(ctx, rmsnorm_forward, out, rstd, in, weight, eps);
}

void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in,
                      Tensor weight, Tensor rstd) {
  DAPO_DISPATCH(ctx, rmsnorm_backward, din, dweight, dout, in, weight, rstd);
}

}  // namespace dapo::ops
