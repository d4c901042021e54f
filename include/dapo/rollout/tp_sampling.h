// Token sampling from vocabulary-sharded logits (the LM head is
// column-parallel: tp rank q holds ids [q * V / tp, (q + 1) * V / tp)),
// without gathering the full-vocabulary logits: the shard steps of
// ops/sampling.h joined by small per-row collectives on the tp Comm.
//
// Rules: exactly ops::sample_tokens' (temperature, top-k, top-p, the
// Philox draw, the id-order CDF walk, the log-prob under the full softmax).
// Because the walk is in id order it is also shard order: the shards'
// kept masses (tp doubles per row) locate the shard where u * mass falls,
// and that shard walks its part with the residual. Top-k and top-p
// thresholds come from the radix descent of ops/sampling_select.h on
// histograms summed over ranks (integers, exact), so every rank and the
// unsharded CUDA op make the same cut decisions.
//
// What crosses ranks per sampled row: the max (1 f32), the shard sums and
// kept masses (tp f64 each, gathered), per search level 2 x 256 i64
// (summed; up to 4 levels for top-k and 4 for top-p), tie counts (tp i64),
// and the token and log-prob (1 i32 + 1 f32).
//
// tp = 1: exactly ops::sample_tokens (same tokens and log-prob bits).
// tp > 1: tokens equal the unsharded op's on the same backend except where
// u falls within float rounding of a CDF boundary (the walk's running sum
// is formed per shard and then across shards, in another order than the
// unsharded op's), or, against the CPU op, where the top-p mass is within
// rounding of top_p (the CPU op sums it in sorted order); greedy and top-k
// cuts always equal. Log-probs agree to float rounding (the total is summed
// per shard, then over shards in rank order). Every rank returns the same
// tokens and log-probs.
#pragma once

#include <cstdint>

#include "dapo/ops/sampling.h"
#include "dapo/parallel/comm.h"

namespace dapo::rollout {

// Collective over tp (every rank calls it with the same R and params).
// tokens (R) i32, logprobs (R) f32: overwritten, global ids.
// logits (B, V / tp): this rank's shard, f32 (CPU) or f32/bf16 (CUDA);
// the shards are equal, so the full vocabulary is V = tp * logits.size(1).
// logit_rows, rng_streams, rng_counters: as ops::sample_tokens (the same on
// every rank). vocab_start: the first id of this rank's shard.
// Host tensors go through MPI; device tensors through NCCL on ctx.stream.
// ctx.scratch: about R * (4.2 KB + 24 * tp) bytes on the device of the
// logits (plus sample_tokens' needs when tp = 1).
void sample_tokens_tp(const ops::Ctx& ctx, const parallel::Comm& tp, Tensor tokens, Tensor logprobs,
                      Tensor logits, Tensor logit_rows, Tensor rng_streams, Tensor rng_counters,
                      const ops::SamplingParams& p, int64_t vocab_start);

}  // namespace dapo::rollout
