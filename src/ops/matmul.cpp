// Backend dispatch of the dense matrix products (matmul, linear).
#include "dapo/ops/matmul.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void matmul(const Ctx& ctx, Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  DAPO_DISPATCH(ctx, matmul, c, a, b, trans_a, trans_b, alpha, beta);
}

void linear_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias) {
  DAPO_DISPATCH(ctx, linear_forward, out, in, weight, bias);
}

void linear_residual_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor res) {
  DAPO_DISPATCH(ctx, linear_residual_forward, out, in, weight, res);
}

bool linear_residual_preferred(const Ctx& ctx, int64_t N) {
#ifdef DAPO_WITH_CUDA
  return ctx.backend != Backend::cpu && N >= cuda::detail::kLinearResidualMinRows;
#else
  (void)ctx, (void)N;
  return false;
#endif
}

void linear_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor in, Tensor weight) {
  DAPO_DISPATCH(ctx, linear_backward, din, dweight, dbias, dout, in, weight);
}

}  // namespace dapo::ops
