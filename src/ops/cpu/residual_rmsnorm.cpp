// CPU reference of the fused residual add + RMSNorm (fp32 values, row
// reductions in double, as rmsnorm.cpp): the add, then the CPU RMSNorm on
// the stored sum; the backward is RMSNorm's with din added into dsum.

#include "cpu_check.h"
#include "dapo/ops/rmsnorm.h"
#include "rmsnorm_rows.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops::cpu {
using detail::check_f32;

// The contract is checked by ops::residual_rmsnorm_forward; the reference computes in f32.
void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps) {
  check_f32(a, "a");
  const int64_t N = a.shape[0], C = a.shape[1];
  float* s = sum.ptr<float>();
  const float* x = a.ptr<float>();
  const float* y = b.ptr<float>();
  const int64_t n = N * C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) s[i] = x[i] + y[i];
  cpu::rmsnorm_forward(ctx, out, rstd, sum, weight, eps);
}

void residual_rmsnorm_backward(const Ctx&, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum, Tensor weight,
                               Tensor rstd) {
  check_f32(sum, "sum");
  const int64_t N = sum.shape[0], C = sum.shape[1];
  detail::rmsnorm_backward_rows(dsum.ptr<float>(), true, dweight.ptr<float>(), dout.ptr<float>(), sum.ptr<float>(),
                                weight.ptr<float>(), rstd.ptr<float>(), N, C);
}

}  // namespace dapo::ops::cpu
