// Backend dispatch of the AdamW step, and the checks and scalars both
// backends share.
#include "dapo/ops/adamw.h"

#include <cmath>

#include "src/ops/dispatch.h"
#include "src/ops/cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops {

namespace detail {

AdamWScalars adamw_scalars(const AdamWParams& p) {
  // Formed once, in double, the way PyTorch forms them on the host (bias
  // corrections as Python floats), then rounded to fp32.
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
  AdamWScalars s;
  s.decay = float(1.0 - double(p.lr) * double(p.weight_decay));
  s.step_size = float(double(p.lr) / bc1);
  s.bc2_sqrt = float(std::sqrt(bc2));
  s.b1 = p.beta1;
  s.b2 = p.beta2;
  s.one_m_b1 = 1.0f - p.beta1;
  s.one_m_b2 = 1.0f - p.beta2;
  s.eps = p.eps;
  s.scale = p.grad_scale;
  return s;
}

}  // namespace detail

namespace {

// The contract of adamw.h: one shape, f32 state, a bf16 copy of as many
// elements, and parameters in range.
void check_adamw(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& param_bf16, const AdamWParams& p) {
  DAPO_CHECK(param.same_shape(grad) && param.same_shape(exp_avg) && param.same_shape(exp_avg_sq),
             "adamw shapes ", param.shape_string(), " ", grad.shape_string(), " ", exp_avg.shape_string(), " ",
             exp_avg_sq.shape_string());
  for (const Tensor* t : {&param, &grad, &exp_avg, &exp_avg_sq})
    DAPO_CHECK(t->dtype == DType::f32, "adamw state is ", dtype_name(t->dtype), ", expected f32");
  if (param_bf16.defined())
    DAPO_CHECK(param_bf16.dtype == DType::bf16 && param_bf16.numel() == param.numel(), "adamw param_bf16 ",
               dtype_name(param_bf16.dtype), " ", param_bf16.shape_string(), " for param ", param.shape_string());
  DAPO_CHECK(p.step >= 1, "adamw step ", p.step, " (1-based)");
  DAPO_CHECK(p.lr >= 0.0f && p.eps > 0.0f, "adamw lr ", p.lr, " eps ", p.eps);
  DAPO_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f, "adamw betas ", p.beta1, " ",
             p.beta2);
}

}  // namespace

void adamw_step(const Ctx& ctx, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_bf16,
                const AdamWParams& p) {
  check_adamw(param, grad, exp_avg, exp_avg_sq, param_bf16, p);
  DAPO_DISPATCH(ctx, adamw_step, param, grad, exp_avg, exp_avg_sq, param_bf16, p);
}

}  // namespace dapo::ops
