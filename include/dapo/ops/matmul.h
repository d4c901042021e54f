// Dense matrix products: a general 2-D GEMM and the nn.Linear forward and
// backward built on it. Every projection of the model (q/k/v/o, gate/up/down,
// lm_head) goes through these, so their accumulate semantics matter:
// weight and bias gradients are ADDED to (+=), because the micro-batches of
// one mini-batch accumulate into one contiguous gradient buffer; input
// gradients are OVERWRITTEN, because every activation gradient has exactly
// one producer.
//
// Layout: row-major, contiguous. Weights use HF's nn.Linear layout
// (out_features, in_features), so y = x @ W^T. On the CPU backend all
// tensors are f32 and the GEMM is OpenBLAS's cblas_sgemm. The CUDA backend
// runs cuBLASLt (the handle, workspace and plan cache of ctx.libraries) with
// the dtypes listed at the cuda:: declarations below.
//
// An optional tensor (bias, dbias, din) is passed as an empty Tensor{}
// (no data, no dimensions) to mean "none" / "skip".
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// C = alpha * op(A) @ op(B) + beta * C, op(X) = X^T when trans_x.
// c: (M, N) f32, updated in place (overwritten when beta == 0: its old
//    contents are then ignored, even NaN or inf, as BLAS specifies).
// a: (M, K) f32, or (K, M) when trans_a.
// b: (K, N) f32, or (N, K) when trans_b.
// c must not overlap a or b. Any of M, N, K may be 0 (K == 0 gives beta*C).
void matmul(const Ctx& ctx, Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha,
            float beta);

// out = in @ weight^T + bias.
// out: (N, O) f32, overwritten.   in: (N, I) f32.
// weight: (O, I) f32 (HF nn.Linear layout).   bias: (O) f32, or Tensor{} for none.
// out must not overlap in, weight or bias.
void linear_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias);

// out = res + in @ weight^T: a product with its residual added in the GEMM
// (a row-parallel projection at tp = 1 and the residual stream it feeds).
// out: (N, O) f32, overwritten.   in: (N, I) f32.   weight: (O, I) f32.
// res: (N, O) f32; it may be out itself (then accumulated into), else it
// must not overlap it. out must not overlap in or weight.
void linear_residual_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor res);

// Whether the backend would rather take linear_residual_forward then a plain
// norm than linear_forward then residual_rmsnorm_forward (rmsnorm.h)
// for N rows of in: on CUDA the prefill's many rows, where the GEMM is bound
// by its FLOPs and reads res for free, and the product's partial sum then
// never goes through memory (0.5B, 32,768 rows: 48 norm passes of ~80 us).
// Never on the CPU backend, which keeps one path as the reference.
bool linear_residual_preferred(const Ctx& ctx, int64_t N);

// Gradients of linear_forward given dout = dL/dout.
// din: (N, I) f32, OVERWRITTEN with dout @ weight; Tensor{} skips it (e.g.
//      the first layer's input needs no gradient).
// dweight: (O, I) f32, ACCUMULATED: dweight += dout^T @ in.
// dbias: (O) f32, ACCUMULATED: dbias += sum over rows of dout; Tensor{} when
//      the layer has no bias. The row sum is deterministic for any thread count.
// dout: (N, O) f32.   in: (N, I) f32.   weight: (O, I) f32.
// Outputs must not overlap the inputs or each other.
void linear_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor in, Tensor weight);

// CUDA builds only. Always fp32 accumulation (CUBLAS_COMPUTE_32F); the f32
// path is true fp32 (no TF32). A bf16 output of a plain product (beta == 0,
// no bias) is rounded once (2^-8 relative). With beta != 0 or a bias,
// cuBLASLt's Hopper kernels may round alpha * AB to bf16 before adding beta*C
// or the bias (seen on H100, CUDA 13.0; split-K kernels round once): up to
// 2^-8 (|alpha AB| + |added term|) more, as in PyTorch's bf16 addmm.
// - matmul: a and b bf16 with c bf16 or f32, or a, b, c all f32. beta == 0
//   ignores c's old contents (NaN included); beta == 1 accumulates, also into
//   a bf16 c (the model sums two input gradients into one buffer that way).
// - linear_forward: in, weight bf16 with out bf16 or f32, or all f32; bias
//   Tensor{}, bf16 or f32. A bias of out's dtype is added in the GEMM's
//   epilogue; another is first broadcast into out (one more pass over out).
//   bf16 products of few rows (the decode step's) run linear_forward_multi's
//   skinny kernel instead (linear_multi.h): fp32 accumulation, the bias added
//   in fp32, the output rounded once.
// - linear_residual_forward: linear_forward's dtypes with res of out's; on
//   cuBLASLt always, res as C with beta = 1 (so the rounding above applies:
//   the product may be rounded to bf16 before res is added, as when
//   residual_rmsnorm_forward adds a rounded product).
// - linear_backward: dout, in, weight all bf16 or all f32; din bf16 or f32
//   (f32 for f32 inputs), OVERWRITTEN; dweight f32, ACCUMULATED by the GEMM
//   itself (beta = 1, so fp32 weight gradients add up over micro-batches);
//   dbias f32, ACCUMULATED with a fixed-order two-stage column sum of dout
//   (no atomics). Needs ctx.scratch for the bias gradient's partial sums
//   (4 * ceil(N/64) * O bytes).
// Same shape, dtypes and pointer alignment on the same GPU => same algorithm
// => same bits (the first heuristic choice is cached per device). Any of the
// sizes may be 0 as on the CPU.

}  // namespace dapo::ops
