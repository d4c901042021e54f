// The batch-invariant paged attention (ops::Ctx::batch_invariant, for
// rollout.exact_logprobs): cuda::paged_attention's contract (ops/kv_cache.h),
// computed by attention_forward's kernel reading keys and values through the
// block table. A query row then gets the bits the trainer's packed
// attention_forward gives it: the same key blocks of 64 from position 0 in
// order, the same products and online softmax, whatever the rows around it
// or the cache's layout. No split over the keys: at long contexts and few
// sequences it is slower than the decode kernels (paged_attention.cu).
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops::cuda::detail {

// Arguments as ops::paged_attention's (checked there); bf16, head_dim in
// {16, 32, 64, 128}. A sequence whose query rows outnumber its context or
// whose blocks outrun the table is skipped (its rows left unwritten); a
// block id outside the pool reads as zero keys and values.
void attention_paged_exact(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table,
                           Tensor context_lens, Tensor cu_seqlens_q, float scale);

}  // namespace dapo::ops::cuda::detail
