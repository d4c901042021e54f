// The norm folded into the decode step's products: the contract of
// norm_fold.h, checked once, then the backend.
#include "dapo/ops/norm_fold.h"

#include <utility>

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;

void check_linear_residual_fold(const Tensor& sum, const Tensor& y, const Tensor& ssq, const Tensor& in,
                                const Tensor& weight, const Tensor& res, const Tensor& norm_weight) {
  const char* op = "linear_residual_fold";
  for (const auto& [t, name] : {std::pair{&sum, "sum"}, {&y, "y"}, {&ssq, "ssq"}, {&in, "in"}, {&weight, "weight"},
                                {&res, "res"}})
    DAPO_CHECK(t->ndim == 2, op, ": ", name, " ", t->shape_string(), " must be 2-D");
  check_float(op, in, "in");
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, {&res, "res"}, {&norm_weight, "norm_weight"},
                                {&sum, "sum"}, {&y, "y"}})
    check_dtype(op, *t, in.dtype, name);
  check_dtype(op, ssq, DType::f32, "ssq");
  const int64_t M = in.shape[0], K = in.shape[1], C = weight.shape[0];
  DAPO_CHECK_SHAPE(weight, {C, K});
  DAPO_CHECK_SHAPE(res, {M, C});
  DAPO_CHECK_SHAPE(sum, {M, C});
  DAPO_CHECK_SHAPE(y, {M, C});
  DAPO_CHECK_SHAPE(ssq, {M, norm_fold_parts(C)});
  DAPO_CHECK_SHAPE(norm_weight, {C});
  DAPO_CHECK(sum.data == res.data || !overlaps(sum, res), op, ": sum overlaps res without being the same buffer");
  for (const Tensor* t : {&in, &weight, &res, &norm_weight, &ssq})
    DAPO_CHECK(!overlaps(sum, *t) || t == &res, op, ": sum overlaps an input or ssq");
  for (const Tensor* t : {&sum, &in, &weight, &res, &norm_weight, &ssq})
    DAPO_CHECK(!overlaps(y, *t), op, ": y overlaps another tensor");
  for (const Tensor* t : {&in, &weight, &res, &norm_weight})
    DAPO_CHECK(!overlaps(ssq, *t), op, ": ssq overlaps an input");
}

void check_row_norm_apply(const Tensor& x, const RowNorm& rn) {
  const char* op = "row_norm_apply";
  check_float(op, x, "x");
  DAPO_CHECK(x.ndim == 2, op, ": x ", x.shape_string(), " must be (M, C)");
  detail::check_row_norm(rn, x.shape[0], x.shape[1], op);
  check_dtype(op, rn.ssq, DType::f32, "rn.ssq");
  DAPO_CHECK(!overlaps(x, rn.ssq), op, ": x overlaps ssq");
}

}  // namespace

void detail::check_row_norm(const RowNorm& rn, int64_t M, int64_t C, const char* op) {
  DAPO_CHECK(rn.active(), op, ": no row norm");
  DAPO_CHECK(rn.ssq.dtype == DType::f32 && rn.ssq.ndim == 2 && rn.ssq.shape[0] == M &&
                 rn.ssq.shape[1] == norm_fold_parts(C),
             op, ": row-norm sums of squares ", dtype_name(rn.ssq.dtype), " ", rn.ssq.shape_string(), ", expected f32 (",
             M, ", ", norm_fold_parts(C), ") for ", M, " rows of ", C);
  DAPO_CHECK(rn.eps > 0.0f, op, ": row-norm eps ", rn.eps, " must be > 0");
}

void linear_residual_fold(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight, Tensor res,
                          Tensor norm_weight) {
  check_linear_residual_fold(sum, y, ssq, in, weight, res, norm_weight);
  DAPO_DISPATCH(ctx, linear_residual_fold, sum, y, ssq, in, weight, res, norm_weight);
}

void row_norm_apply(const Ctx& ctx, Tensor x, const RowNorm& rn) {
  check_row_norm_apply(x, rn);
  detail::check_devices(ctx, "row_norm_apply", "rn.ssq", rn.ssq);
  DAPO_DISPATCH(ctx, row_norm_apply, x, rn);
}

bool norm_fold_preferred(const Ctx& ctx, int64_t M, int64_t C, int64_t I) {
  // Batch-invariant: the trainer's unfolded norms.
  if (ctx.backend == Backend::cpu || ctx.batch_invariant) return false;
#ifdef DAPO_WITH_CUDA
  return cuda::detail::norm_fold_preferred(M, C, I);
#else
  (void)M, (void)C, (void)I;
  return false;
#endif
}

}  // namespace dapo::ops
