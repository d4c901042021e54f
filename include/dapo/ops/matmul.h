// The linear products: plain GEMMs and nn.Linear (forward, backward), and
// their fused variants for the decode step and the MLP (below: several
// layers that read one input; gate/up with SwiGLU).
//
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

#include <span>

#include "dapo/ops/context.h"
#include "dapo/ops/norm_fold.h"

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
// Never on the CPU backend, which keeps one path as the reference, nor
// under ctx.batch_invariant (the trainer's path at every row count).
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
//   skinny kernel instead (matmul.h): fp32 accumulation, the bias added
//   in fp32, the output rounded once. Under ctx.batch_invariant the forward
//   products (linear_forward, linear_residual_forward, the multi and SwiGLU
//   ops' products) always take cuBLASLt, with the one algorithm its
//   heuristic picks for 4,096 rows and split-K off, at every row count
//   (cuda/gemm/gemm_plan_cache.cuh): a row's bits do not depend on N.
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

// --------------------------------------------------------------------------
// Several nn.Linear layers that read ONE input, in one op: q/k/v read the
// same normed hidden state, gate/up the same post-attention one, and single
// layers (o_proj, down_proj, lm_head) are a one-segment call. The generation
// engine's decode step multiplies M = (running sequences, 1..256) rows by
// every weight once, so these products are bound by reading the weights; the
// CUDA backend runs them, where it measured faster, as one launch of its own
// skinny kernel (every segment's tiles in one grid, split over K when the
// tiles alone cannot fill the GPU) instead of one cuBLASLt call per layer.
//
// Layout: row-major, contiguous; weights in HF's nn.Linear layout
// (out_features, in_features), so out_i = in @ weight_i^T + bias_i.

// One layer of a linear_forward_multi call. bias is Tensor{} for none.
struct LinearSegment {
  Tensor out;     // (M, N_i), OVERWRITTEN
  Tensor weight;  // (N_i, K)
  Tensor bias;    // (N_i) or Tensor{}
};

// The most segments one call takes (q, k, v is the most the model fuses).
inline constexpr int kMaxLinearSegments = 4;

// For each segment i: out_i (M, N_i) = in (M, K) @ weight_i^T + bias_i.
// 1 <= segments.size() <= kMaxLinearSegments; any M >= 0, N_i >= 0, K >= 0
// (K == 0 gives the bias, or zeros). Outputs must not overlap the input, the
// weights, the biases or each other.
// CPU backend: every tensor f32; the result is a loop of linear_forward.
void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);

// CUDA builds only. Dtypes as cuda::linear_forward (matmul.h): in and every
// weight bf16 with each out bf16 or f32 (segments may differ; the LM head
// writes f32 logits), each bias Tensor{}, bf16 or f32; or all f32 (then
// cuBLASLt).
// The skinny path (detail::linear_multi_skinny_preferred says when: bf16 in,
// few rows) runs every segment in one launch: fp32 accumulation on tensor
// cores, the bias added in fp32, the output rounded once. Split over K, the
// fp32 partial tiles are added by the CTAs of one cluster through
// distributed shared memory, in split order: no atomics, no scratch, and the
// split is a function of (M, K, the N_i, the GPU: its SM count and how many
// clusters it holds) only, so the same call on the same GPU gives the same
// bits; so does the choice between this path and cuBLASLt. A fused call and the same
// layers called one by one may split differently (the grid holds every
// segment's tiles), so their bits may differ by fp32 summation order.
// CUDA-graph capturable (no host sync, no allocation); launched as a
// programmatic dependent of the previous kernel: it reads nothing before
// that kernel has finished (it may ask L2 to prefetch weight rows before,
// a hint that never yields stale data), and lets the next kernel launch as
// soon as all of its CTAs are running. Shapes or pointers the kernel cannot take
// (K % 8 != 0, in or a weight not 16-byte aligned) go to cuBLASLt like the
// rest.
// The cuBLASLt path (everything else) runs consecutive segments of one
// weight shape (gate and up; k and v) as ONE strided-batched cuBLASLt
// product when they also share the out dtype, bias presence and dtype, each
// pointer's alignment (up to 16 bytes), and step through memory evenly:
// weights, outputs and biases each a whole number of elements apart, the
// same step between every pair, and none going backwards when the outputs
// go forwards (the batch runs in the order of ascending outputs: cuBLASLt
// documents no negative batch stride, so none is passed). Biases are added
// as by linear_forward (in the epilogue, or broadcast into the outputs
// first). Otherwise, or when cuBLASLt has no algorithm for the batch, one
// call per segment. The batch is one key of the plan cache,
// so one algorithm: the same call on the same GPU gives the same bits, but
// they may differ from the same segments called one by one (another
// algorithm, possibly another summation order or split).

// --------------------------------------------------------------------------
// Qwen2's MLP up to the down projection in one op: the gate and up products
// of one input and SwiGLU of them,
//   h = silu(in @ w_gate^T) * (in @ w_up^T),
// which is linear_forward_multi(in, {gate, up}) then swiglu_forward(h, gate,
// up) (linear_forward_multi, swiglu.h). It exists for generation: in the decode
// step the SwiGLU pass is a kernel of its own whose launch and dependency
// cost more than its work (an H100 spent ~2.5 us a layer on it at the
// Qwen2.5-0.5B shape, 128 sequences), and in a prefill gate and up make a
// round trip through HBM (0.5B, 32,768 rows: ~1 GB a layer). On CUDA's
// fused paths SwiGLU is the epilogue of the products and gate and up never
// reach memory.

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
