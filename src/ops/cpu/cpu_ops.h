// The CPU backend's ops: the fp32 reference every other backend is tested
// against. Private to dapo_ops and its tests; callers go through the ops::
// functions of dapo/ops/*.h, whose headers hold each op's contract.
#pragma once

#include "dapo/ops/adamw.h"
#include "dapo/ops/attention.h"
#include "dapo/ops/cast.h"
#include "dapo/ops/embedding.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/kv_copy.h"
#include "dapo/ops/linear_multi.h"
#include "dapo/ops/linear_swiglu.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/logprob.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/sum_squares.h"
#include "dapo/ops/swiglu.h"

namespace dapo::ops::cpu {

// adamw.h
void adamw_step(const Ctx& ctx, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                Tensor param_bf16, const AdamWParams& p);

// attention.h
void attention_forward(const Ctx& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                       Tensor cu_seqlens, int64_t max_seqlen, float scale);
void attention_backward(const Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                        Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens, int64_t max_seqlen,
                        float scale);

// cast.h
void cast(const Ctx& ctx, Tensor out, Tensor in);

// embedding.h
void embedding_forward(const Ctx& ctx, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start);
void embedding_backward(const Ctx& ctx, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start);

// fill.h
void fill(const Ctx& ctx, Tensor t, double value);

// kv_cache.h
void kv_cache_write(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v,
                    Tensor slot_mapping);
void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache,
                     Tensor block_table, Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len,
                     float scale);

// kv_copy.h
void kv_block_copy(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor src_blocks, Tensor dst_blocks);

// linear_multi.h
void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);

// linear_swiglu.h
void linear_swiglu_forward(const Ctx& ctx, Tensor h, Tensor gate, Tensor up, Tensor in, Tensor w_gate,
                           Tensor w_up, const RowNorm& rn = {});

// lm_head_sample.h
void lm_head_sample(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor hidden, Tensor weight,
                    Tensor logit_rows, Tensor rng_streams, Tensor rng_counters, const SamplingParams& p,
                    const RowNorm& norm);

// logprob.h
void logits_row_max(const Ctx& ctx, Tensor row_max, Tensor logits, float inv_temperature);
void logits_partial_sums(const Ctx& ctx, Tensor sums, Tensor logits, Tensor targets, Tensor row_max,
                         int64_t vocab_start, float inv_temperature);
void logprob_entropy_finish(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor sums,
                            Tensor row_max);
void logprob_entropy_forward(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor logits,
                             Tensor targets, int64_t vocab_start, float inv_temperature);
void logprob_entropy_backward(const Ctx& ctx, Tensor dlogits, Tensor dlogprob, Tensor dentropy,
                              Tensor logits, Tensor targets, Tensor lse, Tensor entropy,
                              int64_t vocab_start, float inv_temperature);

// matmul.h
void matmul(const Ctx& ctx, Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha,
            float beta);
void linear_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias);
void linear_residual_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor res);
void linear_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor in, Tensor weight);

// norm_fold.h
void linear_residual_fold(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight, Tensor res,
                          Tensor norm_weight);
void row_norm_apply(const Ctx& ctx, Tensor x, const RowNorm& rn);

// qkv_rope_kv_write.h
void qkv_rope_kv_write(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                       Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta, const RowNorm& rn = {});

// rmsnorm.h (the residual fusion)
void residual_rmsnorm_forward(const Ctx& ctx, Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b,
                              Tensor weight, float eps);
void residual_rmsnorm_backward(const Ctx& ctx, Tensor dsum, Tensor dweight, Tensor dout, Tensor sum,
                               Tensor weight, Tensor rstd);

// rmsnorm.h
void rmsnorm_forward(const Ctx& ctx, Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps);
void rmsnorm_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dout, Tensor in,
                      Tensor weight, Tensor rstd);

// rope.h
void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta);
void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta);
void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta);

// sampling.h
void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                   Tensor rng_streams, Tensor rng_counters, const SamplingParams& p);
void sampling_shard_max(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, float temperature);
void sampling_shard_sum(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                        float temperature);
void sampling_select_begin(const Ctx& ctx, Tensor select, const SamplingParams& p, int phase, int64_t vocab);
void sampling_shard_histogram(const Ctx& ctx, Tensor hist, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select, int level);
void sampling_descend(const Ctx& ctx, Tensor select, Tensor hist, int level, float top_p);
void sampling_shard_tie_count(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select);
void sampling_shard_tie_limit(const Ctx& ctx, Tensor select, Tensor tie_counts, int rank, Tensor logits,
                              Tensor logit_rows, Tensor m, float temperature);
void sampling_shard_kept_mass(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select);
void sampling_shard_choose(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                           Tensor m, Tensor select, Tensor sums, Tensor kept, Tensor rng_streams,
                           Tensor rng_counters, const SamplingParams& p, int rank, int64_t vocab_start);

// sum_squares.h
void sum_squares(const Ctx& ctx, Tensor out, Tensor x);

// swiglu.h
void swiglu_forward(const Ctx& ctx, Tensor out, Tensor gate, Tensor up);
void swiglu_backward(const Ctx& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up);

}  // namespace dapo::ops::cpu
