// One AdamW step over a flat fp32 buffer (the master weights, or one rank's
// shard of them), with the semantics of PyTorch's torch.optim.AdamW
// (amsgrad=False, maximize=False), so that runs match the reference
// trainers step for step:
//   g = grad * grad_scale
//   param   *= 1 - lr * weight_decay                 (decoupled decay)
//   exp_avg    = beta1 * exp_avg    + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g^2
//   param   -= lr / (1 - beta1^step) * exp_avg
//              / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)
// grad_scale folds global-norm clipping (min(1, max_norm / norm)) and any
// loss-scale undo into the step, so the gradient buffer is never rewritten.
#pragma once

#include <cstdint>

#include "dapo/ops/context.h"

namespace dapo::ops {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  int64_t step = 1;          // 1-based count of steps taken including this one (bias correction)
  float grad_scale = 1.0f;   // multiplies grad first
};

// param, exp_avg, exp_avg_sq: (N) f32, updated in place.
// grad: (N) f32, read only.
// All four have the same shape (any shape; they are treated as flat).
void adamw_step(const Ctx& ctx, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                const AdamWParams& p);

namespace cpu {
void adamw_step(const Ctx& ctx, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                const AdamWParams& p);
}  // namespace cpu

}  // namespace dapo::ops
