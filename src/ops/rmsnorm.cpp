// RMSNorm: the contract of rmsnorm.h, checked once, then the backend.
#include "dapo/ops/rmsnorm.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;

void check_rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& in, const Tensor& weight,
                           float eps) {
  const char* op = "rmsnorm_forward";
  check_float(op, in, "in");
  check_dtype(op, out, in.dtype, "out");
  check_dtype(op, weight, in.dtype, "weight");
  check_dtype(op, rstd, DType::f32, "rstd");
  DAPO_CHECK(in.ndim == 2, op, ": in ", in.shape_string(), " must be (N, C)");
  const int64_t N = in.shape[0], C = in.shape[1];
  DAPO_CHECK(C > 0, "rmsnorm over an empty row");
  DAPO_CHECK(eps > 0.0f, "rmsnorm eps ", eps, " must be > 0");
  DAPO_CHECK_SHAPE(out, {N, C});
  DAPO_CHECK_SHAPE(rstd, {N});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK(!overlaps(out, in) && !overlaps(out, weight) && !overlaps(rstd, in) && !overlaps(rstd, out),
             op, ": outputs overlap inputs (in-place is not supported)");
}

}  // namespace

void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) {
  check_rmsnorm_forward(out, rstd, in, weight, eps);
  DAPO_DISPATCH(ctx, rmsnorm_forward, out, rstd, in, weight, eps);
}

void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in, Tensor weight,
                      Tensor rstd) {
  detail::check_norm_backward("rmsnorm_backward", din, "din", dweight, dout, in, "in", weight, rstd);
  DAPO_DISPATCH(ctx, rmsnorm_backward, din, dweight, dout, in, weight, rstd);
}

}  // namespace dapo::ops
