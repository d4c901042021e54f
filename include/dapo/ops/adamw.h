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
// param_bf16: Tensor{} (no copy), or a bf16 tensor of N elements (any shape)
// OVERWRITTEN with bf16(updated param), rounded to nearest even as
// ops::cast does: the compute copy of the weights, written in the same pass
// as the update instead of a second pass over the master weights. It must
// not overlap the other four.
// Both backends form the scalars the same way (double on the host, then
// fp32, detail::adamw_scalars) and evaluate the update with the same fp32
// operations in the same order; the CUDA kernel fuses none of them (no FMA),
// like the CPU build for plain x86-64, so the two agree bit for bit there and
// within an ulp or two where the host compiler contracts to FMA.
void adamw_step(const Ctx& ctx, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                Tensor param_bf16, const AdamWParams& p);

// CUDA backend: the same dtypes (f32 state, bf16 copy); one kernel,
// 16-byte accesses when the buffers allow.

}  // namespace dapo::ops
