// Qwen2's MLP up to the down projection in one op: the gate and up products
// of one input and SwiGLU of them,
//   h = silu(in @ w_gate^T) * (in @ w_up^T),
// which is linear_forward_multi(in, {gate, up}) then swiglu_forward(h, gate,
// up) (linear_multi.h, swiglu.h). It exists for generation: in the decode
// step the SwiGLU pass is a kernel of its own whose launch and dependency
// cost more than its work (an H100 spent ~2.5 us a layer on it at the
// Qwen2.5-0.5B shape, 128 sequences), and in a prefill gate and up make a
// round trip through HBM (0.5B, 32,768 rows: ~1 GB a layer). On CUDA's
// fused paths SwiGLU is the epilogue of the products and gate and up never
// reach memory.
#pragma once

#include <span>

#include "dapo/ops/context.h"
#include "dapo/ops/norm_fold.h"

namespace dapo::ops {

// in:     (M, K), the post-attention normed hidden states.
// w_gate: (I, K), w_up: (I, K), HF's gate_proj and up_proj weights (no bias).
// h:      (M, I), OVERWRITTEN.
// gate, up: (M, I) scratch: the unfused path writes the two products there;
//         their contents afterwards are unspecified (the fused path does not
//         touch them).
// h, gate and up must not overlap each other, in or the weights.
// rn:     a folded norm of in's rows (norm_fold.h), or none: in is then y,
//         and the op computes as if in were row_norm_apply(y); the CPU path
//         and CUDA's unfused one apply it to `in` in place (its contents
//         afterwards are unspecified), CUDA's fused one scales the products'
//         fp32 sums by each row's rstd before rounding them (a deep tile's
//         spare warp computes the rstd; other tiles get the rows normed
//         in place first).
// CPU: f32 throughout, the two ops exactly. CUDA: bf16 in, weights and
// outputs (or all f32: the two ops).
void linear_swiglu_forward(const Ctx& ctx, Tensor h, Tensor gate, Tensor up, Tensor in, Tensor w_gate,
                           Tensor w_up, const RowNorm& rn = {});

// CUDA builds only. The fused path (sm_90a builds; detail::linear_swiglu_fused
// says when: bf16, few rows) is one launch: every CTA holds all of its input
// rows (64 a warpgroup) and a tile of gate rows with the up rows of the same
// columns, streams them over the whole of K through a TMA ring, multiplies
// with wgmma (fp32 accumulation, one fixed order over K: no split, no
// atomics, so the same call on the same GPU gives the same bits), rounds
// each product to bf16 and applies SwiGLU with swiglu_forward's arithmetic.
// Its bits differ from the unfused path's only where cuBLASLt or the skinny
// kernel sum the products in another order. CUDA-graph capturable; launched
// as a programmatic dependent (it reads `in` only after the previous kernel
// has finished).

}  // namespace dapo::ops
