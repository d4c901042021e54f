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
#pragma once

#include <span>

#include "dapo/ops/context.h"

namespace dapo::ops {

struct RowNorm;  // norm_fold.h

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

}  // namespace dapo::ops
