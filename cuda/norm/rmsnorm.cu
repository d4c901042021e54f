// CUDA RMSNorm: fp32 statistics and math on bf16 (production) or f32
// storage; the kernels live in rmsnorm_kernels.cuh, shared with the fused
// residual_rmsnorm.
#include "dapo/ops/rmsnorm.h"
#include "norm/rmsnorm_kernels.cuh"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;

using bf16_t = __nv_bfloat16;

void check_same(const Ctx& ctx, const Tensor& t, DType dtype, const char* name) {
  check_device(ctx, t, name);
  DAPO_CHECK(t.dtype == dtype, "rmsnorm: ", name, " is ", dtype_name(t.dtype), ", expected ", dtype_name(dtype));
}

}  // namespace

void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) {
  const DType dt = in.dtype;
  DAPO_CHECK(dt == DType::f32 || dt == DType::bf16, "rmsnorm on ", dtype_name(dt));
  check_same(ctx, in, dt, "in");
  check_same(ctx, out, dt, "out");
  check_same(ctx, weight, dt, "weight");
  check_same(ctx, rstd, DType::f32, "rstd");
  DAPO_CHECK(in.ndim == 2, "rmsnorm_forward: in ", in.shape_string(), " must be (N, C)");
  const int64_t N = in.shape[0], C = in.shape[1];
  DAPO_CHECK(C > 0, "rmsnorm over an empty row");
  DAPO_CHECK(eps > 0.0f, "rmsnorm eps ", eps, " must be > 0");
  DAPO_CHECK_SHAPE(out, {N, C});
  DAPO_CHECK_SHAPE(rstd, {N});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK(!overlaps(out, in) && !overlaps(out, weight) && !overlaps(rstd, in) && !overlaps(rstd, out),
             "rmsnorm_forward: outputs overlap inputs (in-place is not supported)");
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
  DAPO_CHECK(dt == DType::f32 || dt == DType::bf16, "rmsnorm on ", dtype_name(dt));
  check_same(ctx, din, dt, "din");
  check_same(ctx, dout, dt, "dout");
  check_same(ctx, in, dt, "in");
  check_same(ctx, weight, dt, "weight");
  check_same(ctx, dweight, DType::f32, "dweight");
  check_same(ctx, rstd, DType::f32, "rstd");
  DAPO_CHECK(in.ndim == 2, "rmsnorm_backward: in ", in.shape_string(), " must be (N, C)");
  const int64_t N = in.shape[0], C = in.shape[1];
  DAPO_CHECK(C > 0, "rmsnorm over an empty row");
  DAPO_CHECK_SHAPE(din, {N, C});
  DAPO_CHECK_SHAPE(dout, {N, C});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK_SHAPE(dweight, {C});
  DAPO_CHECK_SHAPE(rstd, {N});
  DAPO_CHECK(!overlaps(din, dout) && !overlaps(din, in) && !overlaps(din, dweight) && !overlaps(din, weight) &&
                 !overlaps(din, rstd) && !overlaps(dweight, dout) && !overlaps(dweight, in),
             "rmsnorm_backward: outputs overlap inputs");
  if (dt == DType::f32)
    norm::backward<float, false>(ctx, din.ptr<float>(), dweight.ptr<float>(), dout.ptr<float>(), in.ptr<float>(),
                                 weight.ptr<float>(), rstd.ptr<float>(), N, C);
  else
    norm::backward<bf16_t, false>(ctx, static_cast<bf16_t*>(din.data), dweight.ptr<float>(),
                                  static_cast<const bf16_t*>(dout.data), static_cast<const bf16_t*>(in.data),
                                  static_cast<const bf16_t*>(weight.data), rstd.ptr<float>(), N, C);
}

}  // namespace dapo::ops::cuda
