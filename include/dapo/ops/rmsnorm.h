// The RMSNorm family: Qwen2's RMSNorm, and the same norm fused with the
// residual add that precedes it (below).
//
// RMSNorm of Qwen2 (Qwen2RMSNorm in HF transformers), all in fp32:
//   rstd = 1 / sqrt(mean_c(x^2) + eps),   y = (x * rstd) * weight
// Qwen2 checkpoints store the weight itself (no "1 + weight" offset as in
// Gemma). The per-row rstd is saved by the forward so that the backward
// does not recompute the row reduction.
//
// Dtypes: the CPU backend takes f32 only. On CUDA, in, weight, out, dout
// and din are all bf16 (production) or all f32; rstd and dweight are f32
// either way, and the statistics and all math are fp32 (mean(x^2) summed in
// fp32, in a fixed order).
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out: (N, C) f32, overwritten; must not overlap in (in-place is not
//      supported, so that a CUDA kernel may write out before it has read
//      all of in).
// rstd: (N) f32, overwritten: 1 / sqrt(mean(x^2) + eps) of each row, kept
//      for rmsnorm_backward.
// in: (N, C) f32.   weight: (C) f32.   eps: > 0 (Qwen2: rms_norm_eps = 1e-6).
// mean(x^2) is accumulated in double on the CPU backend, in fp32 on CUDA.
void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps);

// din: (N, C) f32, OVERWRITTEN:
//      din = rstd * (w*dout - x * rstd^2 * mean_c(w*dout*x)).
// dweight: (C) f32, ACCUMULATED (+=): sum over rows of dout * x * rstd; the
//      sum runs over rows in a fixed order, so it is bitwise the same for
//      any thread count (CUDA: a fixed partition of the rows into chunks
//      that depends on N only, partial sums in ctx.scratch, then a fixed-
//      order sum of the partials; no atomics).
// dout: (N, C) f32.   in: (N, C) f32 (the forward's input).   weight: (C) f32.
// rstd: (N) f32 from rmsnorm_forward.
// din must not overlap dout or in.
void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in,
                      Tensor weight, Tensor rstd);

// CUDA backend: bf16 or f32 as above; rmsnorm_backward takes
// C * min(N, 1024) floats of ctx.scratch. A row moves in 16-byte packs when
// C is a multiple of 8 (bf16) or 4 (f32) and the pointers are 16-byte
// aligned, element by element otherwise; C <= 8192 on the element path.

// --------------------------------------------------------------------------
// The residual add fused with the RMSNorm that follows it (llm.c's
// fused_residual_forward): Qwen2's decoder layer does
//   h = h + attn(norm1(h));   h = h + mlp(norm2(h))
// and every "h + ..." is followed by the next norm (the next layer's
// input_layernorm, or the final norm). One pass reads the two summands,
// writes the new residual stream and its normalised copy; the backward
// adds the norm's input gradient straight into the residual gradient.
//
//   sum = a + b                  (rounded to sum's dtype)
//   out = rmsnorm(sum) * weight  (rstd, y as in rmsnorm_forward, from the ROUNDED sum)
//
// Dtypes: the CPU backend takes f32 only. On CUDA, sum, a, b, out, weight,
// dout and dsum are all bf16 (production) or all f32; rstd and dweight are
// f32; all math is fp32 (bf16: a + b in fp32, then rounded once).

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

// CUDA backend: bf16 or f32 as above; the backward takes
// C * min(N, 1024) floats of ctx.scratch (as rmsnorm_backward).

}  // namespace dapo::ops
