// CPU reference of RMSNorm (fp32 values, row reductions in double): OpenMP
// over rows for out/din, over column chunks for dweight so that its sum
// over rows has one fixed order whatever the thread count.
#include "dapo/ops/rmsnorm.h"
#include "cpu_check.h"
#include "rmsnorm_rows.h"
#include "src/ops/cpu/cpu_ops.h"

#include <cmath>

namespace dapo::ops::cpu {
namespace {

using detail::check_f32;

}  // namespace

// The contract is checked by ops::rmsnorm_forward; the reference computes in f32.
void rmsnorm_forward(const Ctx&, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) {
  check_f32(in, "in");
  const int64_t N = in.shape[0], C = in.shape[1];
  float* o = out.ptr<float>();
  float* r = rstd.ptr<float>();
  const float* x = in.ptr<float>();
  const float* w = weight.ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += double(xr[c]) * double(xr[c]);
    // HF: variance (fp32) + eps, then rsqrt in fp32.
    const float rs = 1.0f / std::sqrt(float(ss / double(C)) + eps);
    r[n] = rs;
    float* orow = o + n * C;
    for (int64_t c = 0; c < C; ++c) orow[c] = (xr[c] * rs) * w[c];
  }
}

void rmsnorm_backward(const Ctx&, Tensor din, Tensor dweight, Tensor dout, Tensor in, Tensor weight,
                      Tensor rstd) {
  check_f32(in, "in");
  const int64_t N = in.shape[0], C = in.shape[1];
  detail::rmsnorm_backward_rows(din.ptr<float>(), false, dweight.ptr<float>(), dout.ptr<float>(), in.ptr<float>(),
                                weight.ptr<float>(), rstd.ptr<float>(), N, C);
}

}  // namespace dapo::ops::cpu
