// CPU reference of the fused residual add + RMSNorm (fp32 values, row
// reductions in double, as rmsnorm.cpp): the add, then the CPU RMSNorm on
// the stored sum; the backward is RMSNorm's with din added into dsum.
#include "dapo/ops/residual_rmsnorm.h"

#include <algorithm>

#include "cpu_check.h"
#include "dapo/ops/rmsnorm.h"

namespace dapo::ops::cpu {
namespace {

constexpr int64_t kColumnChunk = 64;

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
  float* dx = dsum.ptr<float>();
  float* dw = dweight.ptr<float>();
  const float* g = dout.ptr<float>();
  const float* x = sum.ptr<float>();
  const float* w = weight.ptr<float>();
  const float* r = rstd.ptr<float>();

  // As rmsnorm_backward: r*w*g - x * r^3 * mean(w*g*x), added to dsum.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gr = g + n * C;
    const float* xr = x + n * C;
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) dot += double(w[c]) * double(gr[c]) * double(xr[c]);
    const double rs = r[n];
    const float coef = float(rs * rs * rs * dot / double(C));
    const float rsf = r[n];
    float* dr = dx + n * C;
    for (int64_t c = 0; c < C; ++c) dr[c] += rsf * (w[c] * gr[c]) - coef * xr[c];
  }

  const int64_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kColumnChunk;
    const int64_t len = std::min(kColumnChunk, C - c0);
    double acc[kColumnChunk] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* gr = g + n * C + c0;
      const float* xr = x + n * C + c0;
      const double rs = r[n];
      for (int64_t j = 0; j < len; ++j) acc[j] += double(gr[j]) * double(xr[j]) * rs;
    }
    for (int64_t j = 0; j < len; ++j) dw[c0 + j] += float(acc[j]);
  }
}

}  // namespace dapo::ops::cpu
