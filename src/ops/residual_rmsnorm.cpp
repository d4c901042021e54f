// The residual add fused with RMSNorm: the contract of rmsnorm.h, checked
// once, then the backend.
#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "dapo/ops/rmsnorm.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;

// sum may be a or b exactly; any other overlap would read a partly updated input.
bool same_or_disjoint(const Tensor& x, const Tensor& y) { return x.data == y.data || !overlaps(x, y); }

void check_residual_rmsnorm_forward(const Tensor& sum, const Tensor& out, const Tensor& rstd, const Tensor& a,
                                    const Tensor& b, const Tensor& weight, float eps) {
  const char* op = "residual_rmsnorm_forward";
  check_float(op, a, "a");
  check_dtype(op, b, a.dtype, "b");
  check_dtype(op, sum, a.dtype, "sum");
  check_dtype(op, out, a.dtype, "out");
  check_dtype(op, weight, a.dtype, "weight");
  check_dtype(op, rstd, DType::f32, "rstd");
  DAPO_CHECK(a.ndim == 2, op, ": a ", a.shape_string(), " must be (N, C)");
  const int64_t N = a.shape[0], C = a.shape[1];
  DAPO_CHECK(C > 0, "rmsnorm over an empty row");
  DAPO_CHECK(eps > 0.0f, "rmsnorm eps ", eps, " must be > 0");
  DAPO_CHECK_SHAPE(b, {N, C});
  DAPO_CHECK_SHAPE(sum, {N, C});
  DAPO_CHECK_SHAPE(out, {N, C});
  DAPO_CHECK_SHAPE(rstd, {N});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK(same_or_disjoint(sum, a) && same_or_disjoint(sum, b), op,
             ": sum overlaps a or b without being the same buffer");
  for (const Tensor* t : {&sum, &a, &b, &weight, &rstd})
    DAPO_CHECK(!overlaps(out, *t), op, ": out overlaps an input or sum");
  for (const Tensor* t : {&sum, &a, &b, &weight})
    DAPO_CHECK(!overlaps(rstd, *t), op, ": rstd overlaps an input or sum");
}

}  // namespace

void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps) {
  check_residual_rmsnorm_forward(sum, out, rstd, a, b, weight, eps);
  DAPO_DISPATCH(ctx, residual_rmsnorm_forward, sum, out, rstd, a, b, weight, eps);
}

void residual_rmsnorm_backward(const Ctx& ctx, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum,
                               Tensor weight, Tensor rstd) {
  detail::check_norm_backward("residual_rmsnorm_backward", dsum, "dsum", dweight, dout, sum, "sum", weight, rstd);
  DAPO_DISPATCH(ctx, residual_rmsnorm_backward, dsum, dweight, dout, sum, weight, rstd);
}

}  // namespace dapo::ops
