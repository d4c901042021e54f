// CPU reference of the AdamW step (fp32 state, OpenMP over elements).
#include "dapo/ops/adamw.h"

#include <cmath>

namespace dapo::ops::cpu {

void adamw_step(const Ctx&, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                const AdamWParams& p) {
  DAPO_CHECK(param.same_shape(grad) && param.same_shape(exp_avg) && param.same_shape(exp_avg_sq),
             "adamw shapes ", param.shape_string(), " ", grad.shape_string(), " ",
             exp_avg.shape_string(), " ", exp_avg_sq.shape_string());
  DAPO_CHECK(p.step >= 1, "adamw step ", p.step, " (1-based)");
  DAPO_CHECK(p.lr >= 0.0f && p.eps > 0.0f, "adamw lr ", p.lr, " eps ", p.eps);
  DAPO_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f, "adamw betas ",
             p.beta1, " ", p.beta2);
  float* w = param.ptr<float>();        // (N)
  const float* g = grad.ptr<float>();   // (N)
  float* m = exp_avg.ptr<float>();      // (N)
  float* v = exp_avg_sq.ptr<float>();   // (N)
  const int64_t n = param.numel();

  // The scalars are formed once, in double, the way PyTorch forms them on
  // the host (bias corrections as Python floats), then rounded to fp32.
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
  const float decay = float(1.0 - double(p.lr) * double(p.weight_decay));
  const float step_size = float(double(p.lr) / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float b1 = p.beta1, b2 = p.beta2, one_m_b1 = 1.0f - p.beta1, one_m_b2 = 1.0f - p.beta2;
  const float eps = p.eps, scale = p.grad_scale;

#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * scale;
    const float mi = b1 * m[i] + one_m_b1 * gi;
    const float vi = b2 * v[i] + one_m_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    w[i] = w[i] * decay - step_size * mi / denom;
  }
}

}  // namespace dapo::ops::cpu
