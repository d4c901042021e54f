// AdamW over the flat master buffer: dp reduction, global-norm clipping,
// non-finite skip, one fused update (adamw.h).
#include "dapo/optim/adamw.h"

#include <cmath>

#include "dapo/core/arena.h"
#include "dapo/core/error.h"
#include "dapo/ops/adamw.h"
#include "dapo/optim/grad_norm.h"
#include "dapo/parallel/comm.h"
#include "device_memory.h"

namespace dapo::optim {

AdamWOptions adamw_options(const OptimConfig& c) {
  AdamWOptions o;
  o.weight_decay = c.weight_decay;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  o.grad_clip = c.grad_clip;
  return o;
}

AdamW::AdamW(model::ParamStore& params, const AdamWOptions& options) : params_(params), options_(options) {
  DAPO_CHECK(options.weight_decay >= 0 && options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 &&
                 options.beta2 < 1 && options.eps > 0 && options.grad_clip >= 0,
             "AdamW options: weight_decay ", options.weight_decay, " betas ", options.beta1, " ", options.beta2,
             " eps ", options.eps, " grad_clip ", options.grad_clip);
  const int64_t n = params.buffer_elements();
  const size_t bytes = size_t(n) * sizeof(float);
  exp_avg_ = static_cast<float*>(memory_alloc(params.device(), bytes));
  exp_avg_sq_ = static_cast<float*>(memory_alloc(params.device(), bytes));
  detail::fill_zero(params.device(), params.stream(), exp_avg_, n);
  detail::fill_zero(params.device(), params.stream(), exp_avg_sq_, n);
}

AdamW::~AdamW() {
  memory_free(params_.device(), exp_avg_);
  memory_free(params_.device(), exp_avg_sq_);
}

void AdamW::set_steps_taken(int64_t steps) {
  DAPO_CHECK(steps >= 0, "AdamW steps ", steps);
  steps_ = steps;
}

Tensor AdamW::exp_avg() const {
  return Tensor(exp_avg_, DType::f32, {params_.buffer_elements()}, params_.device());
}
Tensor AdamW::exp_avg_sq() const {
  return Tensor(exp_avg_sq_, DType::f32, {params_.buffer_elements()}, params_.device());
}

Tensor AdamW::exp_avg(const std::string& name) const {
  const model::ParamEntry& e = params_.entry(name);
  return model::shaped_view(exp_avg_ + e.offset, e.slice.local_shape, params_.device());
}
Tensor AdamW::exp_avg_sq(const std::string& name) const {
  const model::ParamEntry& e = params_.entry(name);
  return model::shaped_view(exp_avg_sq_ + e.offset, e.slice.local_shape, params_.device());
}

void AdamW::load_local(const std::string& name, const float* m, const float* v, int64_t n) {
  const model::ParamEntry& e = params_.entry(name);
  DAPO_CHECK(n == e.param.numel(), name, ": ", n, " optimizer-state elements given, this rank's slice has ",
             e.param.numel());
  detail::copy_from_host(params_.stream(), params_.device(), exp_avg_ + e.offset, m, n);
  detail::copy_from_host(params_.stream(), params_.device(), exp_avg_sq_ + e.offset, v, n);
}

void AdamW::read_local(const std::string& name, float* m, float* v, int64_t n) const {
  const model::ParamEntry& e = params_.entry(name);
  DAPO_CHECK(n == e.param.numel(), name, ": room for ", n, " optimizer-state elements, this rank's slice has ",
             e.param.numel());
  detail::copy_to_host(params_.stream(), params_.device(), m, exp_avg_ + e.offset, n);
  detail::copy_to_host(params_.stream(), params_.device(), v, exp_avg_sq_ + e.offset, n);
}

StepReport AdamW::step(const ops::Ctx& ctx, const StepComms& comms, double lr) {
  DAPO_CHECK(lr >= 0 && std::isfinite(lr), "AdamW lr ", lr);
  all_reduce_gradients(comms.dp, params_);
  StepReport r;
  r.lr = lr;
  r.grad_norm = global_grad_norm(ctx, params_, comms.tp);
  if (!std::isfinite(r.grad_norm)) {
    // Every rank sees the same norm (dp-summed gradients, tp-summed
    // squares), so every rank skips together.
    r.skipped = true;
    r.clip_coef = 0;
    r.steps_taken = steps_;
    return r;
  }
  r.clip_coef = clip_coefficient(r.grad_norm, options_.grad_clip);
  ops::AdamWParams p;
  p.lr = float(lr);
  p.beta1 = float(options_.beta1);
  p.beta2 = float(options_.beta2);
  p.eps = float(options_.eps);
  p.weight_decay = float(options_.weight_decay);
  p.step = steps_ + 1;
  p.grad_scale = float(r.clip_coef);
  // On a GPU the same pass writes the bf16 compute copy the model reads.
  const Tensor compute = params_.device() == Device::cpu ? Tensor{} : params_.compute_parameters();
  ops::adamw_step(ctx, params_.parameters(), params_.gradients(), exp_avg(), exp_avg_sq(), compute, p);
  steps_ += 1;
  r.steps_taken = steps_;
  return r;
}

}  // namespace dapo::optim
