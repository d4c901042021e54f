// CPU reference of the AdamW step (fp32 state, OpenMP over elements).
#include "dapo/ops/adamw.h"
#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/backend_shared.h"

#include <cmath>

namespace dapo::ops::cpu {

void adamw_step(const Ctx&, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_bf16,
                const AdamWParams& p) {
  float* w = param.ptr<float>();        // (N)
  const float* g = grad.ptr<float>();   // (N)
  float* m = exp_avg.ptr<float>();      // (N)
  float* v = exp_avg_sq.ptr<float>();   // (N)
  bf16* wb = param_bf16.defined() ? param_bf16.ptr<bf16>() : nullptr;  // (N) or none
  const int64_t n = param.numel();
  const detail::AdamWScalars s = detail::adamw_scalars(p);

#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * s.scale;
    const float mi = s.b1 * m[i] + s.one_m_b1 * gi;
    const float vi = s.b2 * v[i] + s.one_m_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    const float wi = w[i] * s.decay - s.step_size * mi / denom;
    w[i] = wi;
    if (wb) wb[i] = to_bf16(wi);
  }
}

}  // namespace dapo::ops::cpu
