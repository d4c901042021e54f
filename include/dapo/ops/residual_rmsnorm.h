// The residual add fused with the RMSNorm that follows it (llm.c's
// fused_residual_forward): Qwen2's decoder layer does
//   h = h + attn(norm1(h));   h = h + mlp(norm2(h))
// and every "h + ..." is followed by the next norm (the next layer's
// input_layernorm, or the final norm). One pass reads the two summands,
// writes the new residual stream and its normalised copy; the backward
// adds the norm's input gradient straight into the residual gradient.
//
//   sum = a + b                  (rounded to sum's dtype)
//   out = rmsnorm(sum) * weight  (rstd, y as in rmsnorm.h, from the ROUNDED sum)
//
// Dtypes: the CPU backend takes f32 only. On CUDA, sum, a, b, out, weight,
// dout and dsum are all bf16 (production) or all f32; rstd and dweight are
// f32; all math is fp32 (bf16: a + b in fp32, then rounded once).
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// sum: (N, C), OVERWRITTEN with a + b; may be the same buffer as a or as b
//      (the residual stream updated in place), no partial overlap.
// out: (N, C), OVERWRITTEN with the norm of sum; must not overlap anything.
// rstd: (N) f32, OVERWRITTEN: 1 / sqrt(mean(sum^2) + eps) of each row.
// a, b: (N, C).   weight: (C).   eps: > 0.
// The norm reads sum as stored, so the backward (which reads sum) sees
// exactly the forward's input.
void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps);

// dsum: (N, C), ACCUMULATED: dsum += the norm's input gradient
//      rstd * (w*dout - sum * rstd^2 * mean_c(w*dout*sum))
//      (on CUDA: dsum read, the gradient added in fp32, rounded once).
//      The gradient of a and b is dsum itself (the add passes it through).
// dweight: (C) f32, ACCUMULATED (+=): sum over rows of dout * sum * rstd,
//      in a fixed order (bitwise the same for any thread count; on CUDA a
//      fixed row partition and a fixed-order sum of the partials).
// dout: (N, C).   sum: (N, C), the forward's sum.   weight: (C).
// rstd: (N) f32 from residual_rmsnorm_forward.
// dsum must not overlap dout, sum, weight, rstd or dweight.
void residual_rmsnorm_backward(const Ctx& ctx, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum,
                               Tensor weight, Tensor rstd);

namespace cpu {
void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps);
void residual_rmsnorm_backward(const Ctx& ctx, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum,
                               Tensor weight, Tensor rstd);
}  // namespace cpu

// CUDA builds only: bf16 or f32 as above; the backward takes
// C * min(N, 1024) floats of ctx.scratch (as rmsnorm_backward).
namespace cuda {
void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps);
void residual_rmsnorm_backward(const Ctx& ctx, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum,
                               Tensor weight, Tensor rstd);
}  // namespace cuda

}  // namespace dapo::ops
