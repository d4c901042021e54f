// Backend dispatch of the norm folded into the decode step's products, and
// the shape rules every backend shares.
#include "dapo/ops/norm_fold.h"

#include <utility>

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void detail::check_linear_residual_fold(const Tensor& sum, const Tensor& y, const Tensor& ssq, const Tensor& in,
                                        const Tensor& weight, const Tensor& res, const Tensor& norm_weight) {
  for (const auto& [t, name] : {std::pair{&sum, "sum"}, {&y, "y"}, {&ssq, "ssq"}, {&in, "in"}, {&weight, "weight"},
                                {&res, "res"}})
    DAPO_CHECK(t->ndim == 2, "linear_residual_fold: ", name, " ", t->shape_string(), " must be 2-D");
  const int64_t M = in.shape[0], K = in.shape[1], C = weight.shape[0];
  DAPO_CHECK_SHAPE(weight, {C, K});
  DAPO_CHECK_SHAPE(res, {M, C});
  DAPO_CHECK_SHAPE(sum, {M, C});
  DAPO_CHECK_SHAPE(y, {M, C});
  DAPO_CHECK_SHAPE(ssq, {M, norm_fold_parts(C)});
  DAPO_CHECK_SHAPE(norm_weight, {C});
  DAPO_CHECK(ssq.dtype == DType::f32, "linear_residual_fold: ssq is ", dtype_name(ssq.dtype), ", expected f32");
  DAPO_CHECK(sum.data == res.data || !overlaps(sum, res),
             "linear_residual_fold: sum overlaps res without being the same buffer");
  for (const Tensor* t : {&in, &weight, &res, &norm_weight, &ssq})
    DAPO_CHECK(!overlaps(sum, *t) || t == &res, "linear_residual_fold: sum overlaps an input or ssq");
  for (const Tensor* t : {&sum, &in, &weight, &res, &norm_weight, &ssq})
    DAPO_CHECK(!overlaps(y, *t), "linear_residual_fold: y overlaps another tensor");
  for (const Tensor* t : {&in, &weight, &res, &norm_weight})
    DAPO_CHECK(!overlaps(ssq, *t), "linear_residual_fold: ssq overlaps an input");
}

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
  DAPO_DISPATCH(ctx, linear_residual_fold, sum, y, ssq, in, weight, res, norm_weight);
}

void row_norm_apply(const Ctx& ctx, Tensor x, const RowNorm& rn) {
  detail::check_devices(ctx, "row_norm_apply", "rn.ssq", rn.ssq);
  DAPO_DISPATCH(ctx, row_norm_apply, x, rn);
}

bool norm_fold_preferred(const Ctx& ctx, int64_t M, int64_t C, int64_t I) {
  if (ctx.backend == Backend::cpu) return false;
#ifdef DAPO_WITH_CUDA
  return cuda::detail::norm_fold_preferred(M, C, I);
#else
  (void)M, (void)C, (void)I;
  return false;
#endif
}

}  // namespace dapo::ops
