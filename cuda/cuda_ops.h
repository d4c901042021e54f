// The CUDA backend's ops, and the tuning entry points that tests and
// benchmarks reach past the op (one path of an op alone, a forced plan).
// Private to dapo_ops, its tests and bench/; callers go through the ops::
// functions of dapo/ops/*.h, whose headers hold each op's contract. Plain
// C++: no CUDA header is needed to include it.
#pragma once

#include "dapo/ops/adamw.h"
#include "dapo/ops/attention.h"
#include "dapo/ops/cast.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/embedding.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/kv_copy.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/logprob.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/plan/skinny_gemm_plan.h"
#include "dapo/ops/plan/swiglu_plan.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/step_io.h"
#include "dapo/ops/sum_squares.h"
#include "dapo/ops/swiglu.h"

namespace dapo::ops::cuda {

#include "src/ops/backend_ops.inc"

// What only this backend has: copies and events, step I/O for graphs, and
// the tuning entry points.

// copy.h
void copy(const Ctx& ctx, Tensor dst, Tensor src);
void stream_synchronize(const Ctx& ctx);
void* event_create();
void event_destroy(void* event);
void event_record(const Ctx& ctx, void* event);
void event_synchronize(void* event);

// kv_cache.h
// Bytes of ctx.scratch that cuda::paged_attention takes for N new tokens
// over B sequences (Hq, Hkv, D as in its call), on the current device.
size_t paged_attention_scratch_bytes(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D,
                                     int64_t max_context_len);

namespace detail {
// How a call is spread over CTAs (ops/plan/paged_attention_plan.h, planned
// on the host). paged_attention_split is the plan cuda::paged_attention
// uses on the current device; tests and tuning may force another with
// paged_attention_with_split (its partials also come from ctx.scratch;
// bits depend on the split), which checks the op's contract itself.
using PagedSplit = plan::PagedSplit;
PagedSplit paged_attention_split(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_context_len);
void paged_attention_with_split(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache,
                                Tensor block_table, Tensor context_lens, Tensor cu_seqlens_q,
                                int64_t max_context_len, float scale, const PagedSplit& split);
}  // namespace detail

// matmul.h: linear_forward_multi
namespace detail {
// A skinny launch: a tile shape (an index into plan::kSkinnyTiles), the
// number of K splits (1..8: a cluster), and launch options; planned on the
// host (ops/plan/skinny_gemm_plan.h) from the shape and the current GPU.
using SkinnyPlan = plan::SkinnyPlan;
// The plans' view of the current GPU: its SM count, whether this build has
// the sm_90a tiles, and each tile's cluster occupancy (an occupancy query).
plan::SkinnyGpu skinny_gpu();
// The configurations this build has (for tests and tuning) and their tiles:
// weight rows x input rows per CTA.
int skinny_config_count();
void skinny_config_tile(int config, int& rows_n, int& rows_m);

// Whether the skinny kernel can take this call (dtypes, K % 8, alignment).
bool linear_multi_skinny_supported(const Tensor& in, std::span<const LinearSegment> segments);
// Whether it is expected to beat cuBLASLt there (measured on H100: the rule
// is plan::skinny_preferred). cuda::linear_forward and linear_forward_multi
// route by supported && preferred.
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
// in one wave (measured in the decode step: plan::residual_fold_plan), or `plan`.
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

// matmul.h: linear_swiglu_forward
namespace detail {
// The fused launch's tile (ops/plan/swiglu_plan.h): h columns (gate rows,
// and as many up rows) per CTA, and input rows per CTA (64 or 128).
using SwigluPlan = plan::SwigluPlan;
// Whether the fused kernel can take the call (an sm_90a build, bf16,
// K % 8 == 0, 16-byte aligned bases) and is the op's choice for it.
bool linear_swiglu_supported(const Tensor& h, const Tensor& in, const Tensor& w_gate, const Tensor& w_up);
bool linear_swiglu_preferred(int64_t M, int64_t K, int64_t I);
// The plan the op uses, and the widths the kernel is
// built for (for tests and tuning sweeps).
SwigluPlan linear_swiglu_plan(int64_t M, int64_t K, int64_t I);
std::span<const int> linear_swiglu_widths();
// The fused kernel alone (the call must be supported) with `plan` or, when
// null, linear_swiglu_plan's.
void linear_swiglu_fused(const Ctx& ctx, Tensor h, Tensor in, Tensor w_gate, Tensor w_up,
                         const SwigluPlan* plan = nullptr, const RowNorm* rn = nullptr);

// The prefill's fused path (sm_90a builds): a persistent kernel of 128 input
// rows x 128 h columns (256 weight rows) a tile, for many rows, where the
// products are bound by the tensor cores (cuda/gemm/linear_swiglu_wide.cu). The
// op takes it where linear_swiglu_wide_preferred says so (under a folded
// norm the rows are normed in place first).
bool linear_swiglu_wide_preferred(int64_t M, int64_t K, int64_t I);
void linear_swiglu_wide(const Ctx& ctx, Tensor h, Tensor in, Tensor w_gate, Tensor w_up);
}  // namespace detail

// lm_head_sample.h
namespace detail {
bool lm_head_sample_built();  // the sm_90a kernels are in this build
}  // namespace detail

// matmul.h
namespace detail {
// From this many rows (a prefill chunk; the decode step's products stay on
// the skinny kernel and its folds).
constexpr int64_t kLinearResidualMinRows = 512;
// linear_forward's cuBLASLt path alone. linear_forward itself sends the
// decode step's skinny bf16 products (few rows, see matmul.h) to the
// kernel of linear_forward_multi instead; tests compare the two.
void linear_forward_cublaslt(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias);
}  // namespace detail

// norm_fold.h
namespace detail {
bool norm_fold_preferred(int64_t M, int64_t C, int64_t I);
}  // namespace detail

// rope.h: rope_kv_write
namespace detail {
// Whether rope_kv_write with an active head norm takes its one-kernel path
// for these tensors (bf16, D % 16 == 0, D <= 256, 16-byte aligned), rather
// than rmsnorm_forward on the head rows then the plain kernel.
bool rope_kv_write_head_norm_fused(const Tensor& q, const Tensor& k, const Tensor& k_cache, const Tensor& v_cache,
                                   const Tensor& v, const HeadNorm& hn);
}  // namespace detail

// sampling.h
// out (B, 4) i32 (the u32 words): philox_draw(seed, rng_streams[b],
// rng_counters[b]) computed on the device, for tests that the device draw
// has the host's bits.
void philox_draws(const Ctx& ctx, Tensor out, Tensor rng_streams, Tensor rng_counters, uint64_t seed);

// step_io.h
void step_in(const Ctx& ctx, const StepIn& a);
void step_out(const Ctx& ctx, const StepOut& a);
void set_step_in(CapturedGraph& graph, const StepIn& a);
void set_step_out(CapturedGraph& graph, const StepOut& a);

}  // namespace dapo::ops::cuda
