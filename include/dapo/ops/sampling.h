// Next-token sampling for generation: temperature, top-k, top-p (nucleus),
// one counter-based random draw per row (core/rng.h).
//
// Per row b, with z = logits[b] * (1 / temperature) and p = softmax(z):
//  - temperature == 0: greedy, the argmax of logits (ties: the lowest id);
//  - otherwise, in the deterministic order "p descending, ties by id
//    ascending":
//      top-k (top_k > 0): keep the first top_k tokens;
//      top-p (top_p < 1): of those, renormalised, keep the shortest prefix
//        whose probability reaches top_p (the token that crosses top_p is
//        kept, so at least one token always is);
//      draw u = uniform_float(philox_draw(seed, rng_streams[b],
//        rng_counters[b]).v[0]) in [0, 1) and return the first kept token,
//        walking the kept set in id order, whose cumulative (renormalised)
//        probability exceeds u. The walk is in id order, not probability
//        order, because a CDF in a fixed order moves continuously with the
//        probabilities: two forwards that differ in the last bits (cached vs
//        full, tp = 1 vs tp = 2) and so swap two near-equal probabilities
//        still give the same token, except when u falls in the sliver between
//        them.
// The draw is keyed by (seed, stream, counter) only, and each row is
// computed on its own, so a row's token does not depend on the batch size,
// on its position in the batch, on the other rows or on the thread count.
//
// logprobs[b] is the log-probability of the chosen token under the FULL
// softmax(logits / temperature), before top-k/top-p truncation: it is what
// the trainer recomputes with logprob_entropy_forward(inv_temperature =
// 1 / temperature), not the log-probability of the truncated distribution
// the token was actually drawn from. For temperature == 0 it is the
// log-probability under softmax(logits) (temperature 1).
#pragma once

#include <cstdint>

#include "dapo/ops/context.h"

namespace dapo::ops {

struct SamplingParams {
  uint64_t seed = 0;        // the Philox key; the same for every row and rank
  float temperature = 1.0f; // >= 0; 0 = greedy
  float top_p = 1.0f;       // in (0, 1]; >= 1 disables
  int top_k = 0;            // <= 0 disables
};

// Rows. tokens, logprobs, rng_streams and rng_counters have R entries (the
// sampled rows); row r samples from logits[logit_rows[r]], so several rows
// may share one logits row (the n samples of a prompt whose prefill ends
// this step). logit_rows is (R) i32 with values in [0, B), or, for the
// identity (then R == B), a Tensor without elements: Tensor{} or numel() 0
// (has_logit_rows() is false).
// tokens (R) i32, overwritten: the chosen ids in [0, V).
// logprobs (R) f32, overwritten: see above.
// logits (B, V) f32: the full (tp-gathered) vocabulary.
// rng_streams (R) i64: stream ids from stream_id(), bit-cast to i64.
// rng_counters (R) i64: the draw index within the stream (e.g. the position
//   of the token being sampled).
// ctx.scratch: 8 * V bytes per OpenMP thread on the CPU backend. On CUDA,
//   sample_tokens_gpu_scratch_bytes(R) lets untruncated rows (temperature >
//   0, no top-k/top-p) run as two kernels, each row's pass over 8 SMs (H100,
//   in a decode graph: one row 24 -> 15 us, four 25 -> 17; 128 rows 40 ->
//   42); with less (or no scratch) one CTA a row. The same bits either way.
// CUDA: logits f32 or bf16 (widened exactly, fp32 math as on the CPU), every
//   tensor on the device; tokens and logprobs are written by the kernel and
//   nothing is copied to the host. The token equals the CPU op's except
//   where u falls within float rounding of a CDF boundary, or the top-p mass
//   within rounding of top_p (the two backends round exp differently, and
//   the CUDA op sums the top-p masses per exponent bin, exactly, instead of
//   in sorted order); greedy always equals. NaN and +inf logits raise the
//   device flag (site sampling) and give token 0, log-prob NaN for that
//   row (a -inf logit is a weight of 0, as on the CPU; a row of only -inf
//   is flagged); so does a logit_rows value outside [0, B) (bad-id flag).
//   V (the row, or the shard for the shard ops) at most 2^20. Without
//   top-k/top-p (temperature > 0) the row is read about once: one pass
//   gives, for each of 32 contiguous id ranges (V / 32 ids rounded up to
//   a multiple of 8), its max z and its sum of exp(z - that max); rescaled
//   to the row max in double and summed in id order they give the
//   normaliser and the range where the cumulative mass exceeds u * total,
//   and the walk (in id order, as above) reads from that range on,
//   starting from the mass before it. Those masses differ from the walk's
//   sums of exp(z - m) by float rounding: the walk goes on into the next
//   ranges if its range ends short of the target, and falls back to the
//   last token with a non-zero weight if even the row's end is short, as
//   on the CPU. Dynamic shared memory: 128 KiB per CTA with top-k or top-p
//   (the compacted candidates), none otherwise.
void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                   Tensor rng_streams, Tensor rng_counters, const SamplingParams& p);
// The CUDA op's optional scratch for R sampled rows (see ctx.scratch above):
// each row's 32 parts' (max, sum of exp), 12 bytes each, and alignment.
size_t sample_tokens_gpu_scratch_bytes(int64_t R);

inline bool has_logit_rows(const Tensor& logit_rows) {
  return logit_rows.data != nullptr && logit_rows.numel() > 0;
}

// ---- tp shards --------------------------------------------------------------
// The steps of sampling from a vocabulary split over tp ranks (rank q holds
// ids [vocab_start, vocab_start + Vs) in vocabulary order), without the full
// logits ever on one rank; rollout/tp_sampling.h composes them with the tp
// Comm (only small per-row tensors cross ranks). Each op is comm-free and
// works on this rank's shard: logits (B, Vs) (f32 on the CPU; f32 or bf16 on
// CUDA), logit_rows as above (R rows), m (R) f32 the global max from
// sampling_shard_max all-reduced with max. The top-k/top-p search is the
// radix descent of sampling_select.h: a `select` tensor (R, 9) i64 holds one
// Select per row (its layout is that header's; lims are local ids).
// Per-row f64 values travel as their bits in i64 tensors (Comm has no f64):
// they are gathered, never reduced.

// out (R) f32: the shard's max of z = logits * (1 / temperature), or of the
// raw logits when temperature == 0.
void sampling_shard_max(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, float temperature);
// out (R) i64 (f64 bits): the shard's sum of w = exp(z - m) in fp32 summed in
// double; temperature == 0: of exp(double(x) - double(m)).
void sampling_shard_sum(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m, float temperature);
// select (R, 9) i64, overwritten: phase 0 starts top-k (or top-p when
// top_k is off; nothing when both are off); phase 1 starts top-p inside the
// finished top-k cut. vocab: the full vocabulary size (top_k >= vocab is off).
void sampling_select_begin(const Ctx& ctx, Tensor select, const SamplingParams& p, int phase, int64_t vocab);
// hist (R, 2, 256) i64, overwritten: the shard's level-`level` histogram
// (counts, then significand sums) of the rows still descending (zeros for
// the others). Sum it over ranks (all_reduce sum) before sampling_descend.
void sampling_shard_histogram(const Ctx& ctx, Tensor hist, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select, int level);
// One level of the descent from the rank-summed hist; no logits needed.
void sampling_descend(const Ctx& ctx, Tensor select, Tensor hist, int level, float top_p);
// out (R) i64: the shard's ties at the threshold key of rows whose cut ends
// inside a run of equal weights (0 for other rows). all_gather to (tp, R).
void sampling_shard_tie_count(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select);
// From every shard's tie counts (tp, R) i64, this rank's tie limit (its
// first ties in id order up to the cut's global rank), finishing the cut.
void sampling_shard_tie_limit(const Ctx& ctx, Tensor select, Tensor tie_counts, int rank, Tensor logits,
                              Tensor logit_rows, Tensor m, float temperature);
// out (R) i64 (f64 bits): the shard's kept mass, summed in double in the
// order of the walk. all_gather to (tp, R).
void sampling_shard_kept_mass(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select);
// tokens (R) i32, logprobs (R) f32, overwritten, to be all-reduced over
// ranks: greedy (temperature 0): the global id of the shard's first logit
// equal to m (INT32_MAX if none; reduce with min), logprob -log(sum of sums)
// on every rank. Otherwise u * (sum of kept) picks the shard (kept (tp, R)
// summed in rank order): that rank walks its kept set with the residual and
// writes the global id and log-prob, the others -1 and -inf (reduce with
// max). Non-finite sums: token 0, log-prob NaN on every rank (and the flag).
// sums, kept: (tp, R) i64 (f64 bits), all-gathered.
void sampling_shard_choose(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                           Tensor m, Tensor select, Tensor sums, Tensor kept, Tensor rng_streams,
                           Tensor rng_counters, const SamplingParams& p, int rank, int64_t vocab_start);

}  // namespace dapo::ops
