// CPU reference of the fused residual add + RMSNorm (fp32 values, row
// reductions in double, as rmsnorm.cpp): the add, then the CPU RMSNorm on
// the stored sum; the backward is RMSNorm's with din added into dsum.
#include "dapo/ops/residual_rmsnorm.h"

#include "cpu_check.h"
#include "dapo/ops/rmsnorm.h"
#include "rmsnorm_rows.h"

namespace dapo::ops::cpu {
namespace {

using detail::check_f32;

// sum may be a or b exactly; any other overlap would read a partly updated input.
bool same_or_disjoint(const Tensor& x, const Tensor& y) { return x.data == y.data || !overlaps(x, y); }

}  // namespace

void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps) {
  check_f32(sum, "sum");
  check_f32(a, "a");
  check_f32(b, "b");
  DAPO_CHECK(a.ndim == 2, "residual_rmsnorm_forward: a ", a.shape_string(), " must be (N, C)");
  const int64_t N = a.shape[0], C = a.shape[1];
  DAPO_CHECK_SHAPE(b, {N, C});
  DAPO_CHECK_SHAPE(sum, {N, C});
  DAPO_CHECK(same_or_disjoint(sum, a) && same_or_disjoint(sum, b),
             "residual_rmsnorm_forward: sum overlaps a or b without being the same buffer");
  DAPO_CHECK(!overlaps(out, a) && !overlaps(out, b) && !overlaps(out, sum) && !overlaps(rstd, a) &&
                 !overlaps(rstd, b) && !overlaps(rstd, sum),
             "residual_rmsnorm_forward: out or rstd overlaps sum, a or b");
  float* s = sum.ptr<float>();
  const float* x = a.ptr<float>();
  const float* y = b.ptr<float>();
  const int64_t n = N * C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) s[i] = x[i] + y[i];
  // Checks out, rstd and weight (dtype, shape, overlap with weight) itself.
  cpu::rmsnorm_forward(ctx, out, rstd, sum, weight, eps);
}

void residual_rmsnorm_backward(const Ctx&, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum, Tensor weight,
                               Tensor rstd) {
  check_f32(dsum, "dsum");
  check_f32(dweight, "dweight");
  check_f32(dout, "dout");
  check_f32(sum, "sum");
  check_f32(weight, "weight");
  check_f32(rstd, "rstd");
  DAPO_CHECK(sum.ndim == 2, "residual_rmsnorm_backward: sum ", sum.shape_string(), " must be (N, C)");
  const int64_t N = sum.shape[0], C = sum.shape[1];
  DAPO_CHECK(C > 0, "rmsnorm over an empty row");
  DAPO_CHECK_SHAPE(dsum, {N, C});
  DAPO_CHECK_SHAPE(dout, {N, C});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK_SHAPE(dweight, {C});
  DAPO_CHECK_SHAPE(rstd, {N});
  DAPO_CHECK(!overlaps(dsum, dout) && !overlaps(dsum, sum) && !overlaps(dsum, weight) && !overlaps(dsum, rstd) &&
                 !overlaps(dsum, dweight) && !overlaps(dweight, dout) && !overlaps(dweight, sum),
             "residual_rmsnorm_backward: outputs overlap inputs");
  detail::rmsnorm_backward_rows(dsum.ptr<float>(), true, dweight.ptr<float>(), dout.ptr<float>(), sum.ptr<float>(),
                                weight.ptr<float>(), rstd.ptr<float>(), N, C);
}

}  // namespace dapo::ops::cpu
