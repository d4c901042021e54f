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

namespace cpu {
void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);
}  // namespace cpu

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
namespace cuda {
void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);

namespace detail {
// A skinny launch: a tile shape (an index into the kernel's configuration
// table, linear_multi.cu), the number of K splits (1..8: a cluster), and
// two launch options.
struct SkinnyPlan {
  int config = -1;
  int splits = 1;
  bool l2_prefetch = false;  // weight loads ask L2 for 256-byte blocks
  bool pdl = true;           // programmatic dependent launch
  int lookahead = 0;         // > 0: the first (pipeline depth + this) k-blocks of weights
                             // are prefetched into L2 before the dependency wait (0..64)
};
// The configurations' tiles (for tests and tuning): weight rows x input rows per CTA.
int skinny_config_count();
void skinny_config_tile(int config, int& rows_n, int& rows_m);

// Whether the skinny kernel can take this call (dtypes, K % 8, alignment).
bool linear_multi_skinny_supported(const Tensor& in, std::span<const LinearSegment> segments);
// Whether it is expected to beat cuBLASLt there (measured on H100: the rule
// is in linear_multi.cu). cuda::linear_forward and linear_forward_multi route
// by supported && preferred.
bool linear_multi_skinny_preferred(int64_t M, int64_t K, std::span<const LinearSegment> segments);
// The plan the op uses for a shape on the current GPU.
SkinnyPlan skinny_plan(int64_t M, int64_t K, std::span<const LinearSegment> segments);
// The skinny kernel alone (the call must be supported), with `plan` or, when
// null, skinny_plan's; tests and the tuning sweep call it directly. With an
// active `rn` (norm_fold.h) each input row counts as scaled by its rstd:
// the fp32 sums are scaled before the bias.
void linear_forward_multi_skinny(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments,
                                 const SkinnyPlan* plan = nullptr, const RowNorm* rn = nullptr);
// qkv_rope_kv_write's fused path (qkv_rope_kv_write.h): the skinny product of
// q, k, v (segments 0, 1, 2; bf16 outputs of whole heads of D =
// k_cache.shape[3]) whose epilogue rotates q and k and writes k and v to
// their cache slots, with the bits of the product under `plan` followed by
// rope_kv_write. skinny_rope_plan is skinny_plan's plan with tiles of whole
// heads and the same K splits (so the same bits), or config -1 when no such
// tile exists.
SkinnyPlan skinny_rope_plan(int64_t M, int64_t K, std::span<const LinearSegment> segments, int64_t head_dim);
void linear_forward_multi_skinny_rope(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                                      Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta,
                                      const SkinnyPlan& plan, const RowNorm* rn = nullptr);
// linear_residual_fold's fused path (norm_fold.h): the skinny product of
// in by weight into y whose epilogue adds res into sum, writes y = sum *
// norm_weight and each row's sums of squares in parts of 32 columns into
// ssq. Supported where the skinny kernel takes the product and y is bf16
// rows of a multiple of 4, 8-byte aligned; the plan is skinny_plan's, or
// from 65 to 128 rows TMA tiles of 64 x 64 with 4 K splits where those fit
// in one wave (measured in the decode step: linear_multi.cu), or `plan`.
bool linear_residual_fold_supported(const Tensor& y, const Tensor& in, const Tensor& weight);
// Whether the fold of M rows by an (N, K) weight takes those one-wave TMA
// tiles (norm_fold_preferred asks it of o_proj).
bool linear_residual_fold_one_wave(int64_t M, int64_t K, int64_t N);
void linear_residual_fold_skinny(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight,
                                 Tensor res, Tensor norm_weight, const SkinnyPlan* plan = nullptr);
// The cuBLASLt path alone: cuda::linear_forward's GEMM per segment, or per
// run of segments that can share a strided batch (see above). Returns the
// number of groups run (a batch or a single segment), so that tests can tell
// a batch from a fallback.
int linear_forward_multi_cublaslt(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);
// One strided-batched cuBLASLt product for the longest run of segments from
// segments[0] that can share one (at least 2); returns the run's length, or 0
// when it launched nothing (no such run, a size of 0, a backward stride, or
// no cuBLASLt algorithm). Defined in matmul.cu, next to the GEMM it extends.
int linear_forward_cublaslt_batched(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);
}  // namespace detail
}  // namespace cuda

}  // namespace dapo::ops
