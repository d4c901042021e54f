// What the backends of an op share: the checks of its contract and the
// values both compute the same way. Private to dapo_ops.
#pragma once

#include <initializer_list>

#include "dapo/ops/adamw.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/step_io.h"

namespace dapo::ops::detail {

// adamw.h
// The per-step scalars both backends use (see adamw_step).
struct AdamWScalars {
  float decay, step_size, bc2_sqrt, b1, b2, one_m_b1, one_m_b2, eps, scale;
};
AdamWScalars adamw_scalars(const AdamWParams& p);

// fill.h
// The bits of one element of t's dtype holding `value` (in the low
// dtype_size bytes), after the checks above.
uint64_t fill_pattern(DType dtype, double value);

// kv_cache.h
// paged_attention's contract (shapes, dtypes, aliasing, scalars; not the
// metadata's values), for ops::paged_attention and the CUDA entry point that
// forces a split (cuda::detail::paged_attention_with_split), which bypasses it.
void check_paged_attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& block_table, const Tensor& context_lens, const Tensor& cu_seqlens_q,
                           int64_t max_context_len, float scale);

// matmul.h: linear_forward_multi
// linear_forward_multi's contract (1..kMaxLinearSegments segments, shapes,
// dtypes, aliasing), failing in the name of `op`. Defined in
// src/ops/linear_multi.cpp; also run by CUDA's entry points that tests and
// other ops (qkv_rope_kv_write) call past the op.
void check_linear_forward_multi(const char* op, const Tensor& in, std::span<const LinearSegment> segments);

// matmul.h: linear_swiglu_forward
// The product's contract: in (M, K), w_gate and w_up (I, K), h (M, I), all
// 2-D and of in's dtype (f32 or bf16), h overlapping none of the others
// (fails naming the tensor). Defined in src/ops/linear_swiglu.cpp; also run
// by CUDA's fused kernels when tests call them alone.
void check_linear_swiglu(const Tensor& h, const Tensor& in, const Tensor& w_gate, const Tensor& w_up);

// matmul.h
// linear_forward's contract (linear_residual_forward's but for res),
// failing in the name of `op`. Defined in src/ops/matmul.cpp; also run by
// CUDA's cuBLASLt path when tests call it alone.
void check_linear_forward(const char* op, const Tensor& out, const Tensor& in, const Tensor& weight,
                          const Tensor& bias);

// norm_fold.h
// rn is active, rn.ssq is (M, norm_fold_parts(C)) f32 and rn.eps > 0: the
// row norm of every op that takes one (defined in src/ops/norm_fold.cpp).
void check_row_norm(const RowNorm& rn, int64_t M, int64_t C, const char* op);

// qkv_rope_kv_write.h
// The three outputs as heads: q (T, Hq, D), k and v (T, Hkv, D), D and Hkv
// from k_cache, once ops::qkv_rope_kv_write has checked that they are three
// segments of whole heads.
struct QkvHeads {
  Tensor q, k, v;
};
QkvHeads qkv_heads(std::span<const LinearSegment> qkv, const Tensor& k_cache);

// rope.h
// rope_kv_write's contract (shapes, dtypes, the aliasing it forbids, theta,
// the head norm's weights and eps), errors prefixed with `op`: also
// qkv_rope_kv_write's, which does its work on the products' heads.
void check_rope_kv_write(const char* op, const Tensor& q, const Tensor& k, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& v, const Tensor& positions, const Tensor& slot_mapping,
                         float theta, const HeadNorm& hn);

// sampling.h
// The sampled rows' outputs and keys of every sampling op (sample_tokens,
// lm_head_sample): tokens (R) i32, logprobs (R) f32, rng_streams and
// rng_counters (R) i64 with R = tokens.numel() (fails naming the tensor);
// returns R.
int64_t check_sampled_rows(const Tensor& tokens, const Tensor& logprobs, const Tensor& rng_streams,
                           const Tensor& rng_counters);


}  // namespace dapo::ops::detail
