// RMSNorm folded into the products around it, for the decode step. Qwen2's
// layer runs
//   x = x + o_proj(attn);   xn = rmsnorm(x) * w_post;   h = mlp(xn) ...
// and every norm is a kernel of its own between two products, whose launch
// and dependency cost more than its work at a few hundred rows (an H100
// spent ~1.9 us a norm, two a layer, at the Qwen2.5-0.5B shape with 128
// sequences). The norm of a row is a per-row scale of (x * w):
//   rmsnorm(x)[m, c] * w[c] = rstd_m * (x[m, c] * w[c]),
//   rstd_m = 1 / sqrt(mean_c(x[m, c]^2) + eps),
// and the product that consumes it is linear in its input rows, so
//   (rmsnorm(x) * w) @ W^T = rstd_m * ((x * w) @ W^T).
// The producing product (o_proj, down_proj) therefore writes, in its
// epilogue, the residual sum x, y = x * w and each row's sum of squares in
// parts of kNormFoldPart columns (no row spans CTAs' tiles there); the
// consuming product (q/k/v, gate/up) sums the parts of each of its rows in a
// fixed order and scales its fp32 accumulators by rstd. No kernel, no
// dependency and no pass over x is left for the norm. The bits differ from
// the separate norm's (y is rounded before the scale instead of after), by a
// bf16 rounding of the input rows.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// Columns per part of the row sums of squares.
inline constexpr int64_t kNormFoldPart = 32;
// Parts of a row of C columns: ceil(C / kNormFoldPart).
inline int64_t norm_fold_parts(int64_t C) { return (C + kNormFoldPart - 1) / kNormFoldPart; }

// A folded norm of an op's input rows: the op treats row m of its input y
// as y[m, :] * rstd_m with
//   rstd_m = 1 / sqrt((ssq[m][0] + ssq[m][1] + ... + ssq[m][P-1]) / C + eps),
// the sum in fp32 in that order, C = the input's columns, P =
// norm_fold_parts(C). Tensor{} ssq: no norm (the input is used as is).
struct RowNorm {
  Tensor ssq;  // (M, P) f32, as linear_residual_fold writes it: a row's parts are
               // adjacent, so a consumer reads them in a few wide loads
  float eps = 0.0f;
  bool active() const { return ssq.defined(); }
};

// The producer: a row-parallel product with the residual add and the next
// norm's row statistics in its epilogue.
//   sum = res + in @ weight^T        (CUDA bf16: the product rounded to bf16
//                                     first, then the add in fp32, rounded)
//   y   = sum * norm_weight          (per column, from the ROUNDED sum, rounded)
//   ssq[m][p] = sum over c in [32p, 32p + 32) of sum[m, c]^2 (fp32, rounded sum)
// so that RowNorm{ssq, eps} on y gives rmsnorm(sum) * norm_weight.
// in: (M, K).   weight: (C, K), HF's nn.Linear layout, no bias.
// res: (M, C).  norm_weight: (C).
// sum: (M, C), OVERWRITTEN; may be the same buffer as res (no partial overlap).
// y:   (M, C), OVERWRITTEN.   ssq: (M, norm_fold_parts(C)) f32, OVERWRITTEN.
// y and ssq overlap nothing else.
// CPU: f32 throughout. CUDA: bf16 in, weight, res, norm_weight, sum and y;
// one launch (the skinny product's epilogue, matmul.h) where the skinny
// kernel can take the product (any M; it is the op's choice below
// norm_fold_preferred's rows), else the product into y then one pass.
void linear_residual_fold(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight, Tensor res,
                          Tensor norm_weight);

// x[m, :] = x[m, :] * rstd_m in place (x: (M, C), rstd from rn as above;
// CUDA: bf16 or f32, rounded once). The consumers' fallback where their
// fused kernel cannot take a RowNorm; rn must be active.
void row_norm_apply(const Ctx& ctx, Tensor x, const RowNorm& rn);

// Whether a decode step of M rows of a model with hidden size C and MLP
// width I (this rank's) should fold its norms on this backend (tp = 1 is
// the caller's to decide). Never on the CPU, whose norm costs nothing next
// to its products. On CUDA where it was measured faster (H100, decode graph
// at 128 rows): where gate/up's fused tile has the rstd warp (one CTA an SM)
// and, above 64 rows, o_proj's fold runs in one wave (Qwen2.5-0.5B: 1.33 ->
// 1.30 ms). Not elsewhere: at the 1.5B shape the folded products were
// slower than the norms they replaced (2.66 -> 2.83 ms). Never under
// ctx.batch_invariant (the trainer's norms are not folded).
bool norm_fold_preferred(const Ctx& ctx, int64_t M, int64_t C, int64_t I);

}  // namespace dapo::ops
