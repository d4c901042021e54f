// The optimizer of the update: AdamW over a ParamStore's flat fp32 master
// buffer (docs/DESIGN.md sections 2 phase 8 and 3b), with torch.optim.AdamW's
// semantics as verl's FSDP actor uses it:
//  - weight decay (decoupled) on EVERY parameter, norms and biases
//    included: verl builds AdamW over module.parameters() with one
//    weight_decay and no exclusions;
//  - per mini-batch: gradients summed over dp (grad_norm.h), the global
//    grad norm over tp, clipping by optim.grad_clip with
//    torch.nn.utils.clip_grad_norm_'s factor min(1, clip / (norm + 1e-6)),
//    and a skipped step when the norm is not finite (verl's dp_actor: warn,
//    no update); then one ops::adamw_step over the whole buffer with the
//    clip factor folded into grad_scale;
//  - the learning rate comes from the caller (lr_schedule.h: it depends on
//    the training step, not on the optimizer steps taken).
//
// State: exp_avg and exp_avg_sq are two fp32 buffers with the master
// buffer's layout (same offsets, zero padding), on the store's device, with
// named views for checkpoints, and the count of steps taken (bias
// correction), which a checkpoint must save with them: it is smaller than
// the number of mini-batches when steps were skipped.
//
// Ownership: the optimizer owns its two buffers; the ParamStore must
// outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "dapo/core/config.h"
#include "dapo/model/param_store.h"
#include "dapo/ops/context.h"

namespace dapo::parallel {
class Comm;
}

namespace dapo::optim {

struct AdamWOptions {
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0: no clipping
};
AdamWOptions adamw_options(const OptimConfig& config);

// What one step did (the trainer's actor/grad_norm, actor/lr metrics).
struct StepReport {
  double lr = 0;
  double grad_norm = 0;   // global, before clipping
  double clip_coef = 1;   // factor the gradients were scaled by (1: not clipped; 0: skipped)
  bool skipped = false;   // non-finite grad norm: nothing was updated
  int64_t steps_taken = 0;  // after this step
};

// The data-parallel and tensor-parallel groups of this rank; nullptr (or a
// size-1 Comm) for none.
struct StepComms {
  const parallel::Comm* dp = nullptr;
  const parallel::Comm* tp = nullptr;
};

class AdamW {
 public:
  AdamW(model::ParamStore& params, const AdamWOptions& options);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One optimizer step from the gradients accumulated in params (collective
  // over comms.dp and comms.tp): reduce over dp, norm, clip, update. The
  // gradient buffer holds the dp-summed, UNclipped gradients afterwards
  // (the clip factor is applied inside the update); zeroing it for the next
  // mini-batch is the caller's. lr >= 0.
  StepReport step(const ops::Ctx& ctx, const StepComms& comms, double lr);

  const AdamWOptions& options() const { return options_; }
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps);  // restoring a checkpoint; >= 0

  // Flat buffers (padding included), layout of params.parameters().
  Tensor exp_avg() const;
  Tensor exp_avg_sq() const;
  // This rank's slice of one tensor's moments (shape of params.param(name)).
  Tensor exp_avg(const std::string& name) const;
  Tensor exp_avg_sq(const std::string& name) const;
  // Host copies in and out of one tensor's moments (this rank's slice,
  // `n` elements each), for checkpoints on any device.
  void load_local(const std::string& name, const float* exp_avg, const float* exp_avg_sq, int64_t n);
  void read_local(const std::string& name, float* exp_avg, float* exp_avg_sq, int64_t n) const;

 private:
  model::ParamStore& params_;
  AdamWOptions options_;
  int64_t steps_ = 0;
  float* exp_avg_ = nullptr;     // (buffer_elements) f32
  float* exp_avg_sq_ = nullptr;  // (buffer_elements) f32
};

}  // namespace dapo::optim
