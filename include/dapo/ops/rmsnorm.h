// RMSNorm of Qwen2 (Qwen2RMSNorm in HF transformers), all in fp32:
//   rstd = 1 / sqrt(mean_c(x^2) + eps),   y = (x * rstd) * weight
// Qwen2 checkpoints store the weight itself (no "1 + weight" offset as in
// Gemma). The per-row rstd is saved by the forward so that the backward
// does not recompute the row reduction.
//
// Dtypes: the CPU backend takes f32 only. On CUDA, in, weight, out, dout
// and din are all bf16 (production) or all f32; rstd and dweight are f32
// either way, and the statistics and all math are fp32 (mean(x^2) summed in
// fp32, in a fixed order). residual_rmsnorm.h fuses the residual add that
// precedes most of Qwen2's norms with this op.
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

namespace cpu {
void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps);
void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in,
                      Tensor weight, Tensor rstd);
}  // namespace cpu

// CUDA builds only: bf16 or f32 as above; rmsnorm_backward takes
// C * min(N, 1024) floats of ctx.scratch. A row moves in 16-byte packs when
// C is a multiple of 8 (bf16) or 4 (f32) and the pointers are 16-byte
// aligned, element by element otherwise; C <= 8192 on the element path.
namespace cuda {
void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps);
void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in,
                      Tensor weight, Tensor rstd);
}  // namespace cuda

}  // namespace dapo::ops
