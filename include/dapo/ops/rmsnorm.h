// RMSNorm of Qwen2 (Qwen2RMSNorm in HF transformers), all in fp32:
//   rstd = 1 / sqrt(mean_c(x^2) + eps),   y = (x * rstd) * weight
// Qwen2 checkpoints store the weight itself (no "1 + weight" offset as in
// Gemma). The per-row rstd is saved by the forward so that the backward
// does not recompute the row reduction.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out: (N, C) f32, overwritten; must not overlap in (in-place is not
//      supported, so that a CUDA kernel may write out before it has read
//      all of in).
// rstd: (N) f32, overwritten: 1 / sqrt(mean(x^2) + eps) of each row, kept
//      for rmsnorm_backward.
// in: (N, C) f32.   weight: (C) f32.   eps: > 0 (Qwen2: rms_norm_eps = 1e-6).
// mean(x^2) is accumulated in double on the CPU backend.
void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps);

// din: (N, C) f32, OVERWRITTEN:
//      din = rstd * (w*dout - x * rstd^2 * mean_c(w*dout*x)).
// dweight: (C) f32, ACCUMULATED (+=): sum over rows of dout * x * rstd; the
//      sum runs over rows in a fixed order, so it is bitwise the same for
//      any thread count.
// dout: (N, C) f32.   in: (N, C) f32 (the forward's input).   weight: (C) f32.
// rstd: (N) f32 from rmsnorm_forward.
// din must not overlap dout or in.
void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in,
                      Tensor weight, Tensor rstd);

namespace cpu {
void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps);
void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in,
                      Tensor weight, Tensor rstd);
}  // namespace cpu

}  // namespace dapo::ops
