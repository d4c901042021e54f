// CUDA residual add + RMSNorm: one pass over a, b (sum and out written) in
// the forward, dsum read-add-written once in the backward; kernels shared
// with rmsnorm.cu (rmsnorm_kernels.cuh).
#include "dapo/ops/residual_rmsnorm.h"
#include "norm/rmsnorm_kernels.cuh"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;

using bf16_t = __nv_bfloat16;

void check_same(const Ctx& ctx, const Tensor& t, DType dtype, const char* name) {
  check_device(ctx, t, name);
  DAPO_CHECK(t.dtype == dtype, "residual_rmsnorm: ", name, " is ", dtype_name(t.dtype), ", expected ",
             dtype_name(dtype));
}

bool same_or_disjoint(const Tensor& x, const Tensor& y) { return x.data == y.data || !overlaps(x, y); }

}  // namespace

void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps) {
  const DType dt = a.dtype;
  DAPO_CHECK(dt == DType::f32 || dt == DType::bf16, "residual_rmsnorm on ", dtype_name(dt));
  check_same(ctx, sum, dt, "sum");
  check_same(ctx, out, dt, "out");
  check_same(ctx, a, dt, "a");
  check_same(ctx, b, dt, "b");
  check_same(ctx, weight, dt, "weight");
  check_same(ctx, rstd, DType::f32, "rstd");
  DAPO_CHECK(a.ndim == 2, "residual_rmsnorm_forward: a ", a.shape_string(), " must be (N, C)");
  const int64_t N = a.shape[0], C = a.shape[1];
  DAPO_CHECK(C > 0, "rmsnorm over an empty row");
  DAPO_CHECK(eps > 0.0f, "rmsnorm eps ", eps, " must be > 0");
  DAPO_CHECK_SHAPE(b, {N, C});
  DAPO_CHECK_SHAPE(sum, {N, C});
  DAPO_CHECK_SHAPE(out, {N, C});
  DAPO_CHECK_SHAPE(rstd, {N});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK(same_or_disjoint(sum, a) && same_or_disjoint(sum, b),
             "residual_rmsnorm_forward: sum overlaps a or b without being the same buffer");
  for (const Tensor* t : {&sum, &a, &b, &weight, &rstd})
    DAPO_CHECK(!overlaps(out, *t), "residual_rmsnorm_forward: out overlaps an input or sum");
  for (const Tensor* t : {&sum, &a, &b, &weight})
    DAPO_CHECK(!overlaps(rstd, *t), "residual_rmsnorm_forward: rstd overlaps an input or sum");
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
  DAPO_CHECK(dt == DType::f32 || dt == DType::bf16, "residual_rmsnorm on ", dtype_name(dt));
  check_same(ctx, dsum, dt, "dsum");
  check_same(ctx, dout, dt, "dout");
  check_same(ctx, sum, dt, "sum");
  check_same(ctx, weight, dt, "weight");
  check_same(ctx, dweight, DType::f32, "dweight");
  check_same(ctx, rstd, DType::f32, "rstd");
  DAPO_CHECK(sum.ndim == 2, "residual_rmsnorm_backward: sum ", sum.shape_string(), " must be (N, C)");
  const int64_t N = sum.shape[0], C = sum.shape[1];
  DAPO_CHECK(C > 0, "rmsnorm over an empty row");
  DAPO_CHECK_SHAPE(dsum, {N, C});
  DAPO_CHECK_SHAPE(dout, {N, C});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK_SHAPE(dweight, {C});
  DAPO_CHECK_SHAPE(rstd, {N});
  for (const Tensor* t : {&dout, &sum, &weight, &rstd, &dweight})
    DAPO_CHECK(!overlaps(dsum, *t), "residual_rmsnorm_backward: dsum overlaps an input or dweight");
  DAPO_CHECK(!overlaps(dweight, dout) && !overlaps(dweight, sum) && !overlaps(dweight, weight) &&
                 !overlaps(dweight, rstd),
             "residual_rmsnorm_backward: dweight overlaps an input");
  if (dt == DType::f32)
    norm::backward<float, true>(ctx, dsum.ptr<float>(), dweight.ptr<float>(), dout.ptr<float>(), sum.ptr<float>(),
                                weight.ptr<float>(), rstd.ptr<float>(), N, C);
  else
    norm::backward<bf16_t, true>(ctx, static_cast<bf16_t*>(dsum.data), dweight.ptr<float>(),
                                 static_cast<const bf16_t*>(dout.data), static_cast<const bf16_t*>(sum.data),
                                 static_cast<const bf16_t*>(weight.data), rstd.ptr<float>(), N, C);
}

}  // namespace dapo::ops::cuda
