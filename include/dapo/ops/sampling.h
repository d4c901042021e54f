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

// tokens (B) i32, overwritten: the chosen ids in [0, V).
// logprobs (B) f32, overwritten: see above.
// logits (B, V) f32: the full (tp-gathered) vocabulary.
// rng_streams (B) i64: stream ids from stream_id(), bit-cast to i64.
// rng_counters (B) i64: the draw index within the stream (e.g. the position
//   of the token being sampled).
// ctx.scratch: 8 * V bytes per OpenMP thread on the CPU backend; none on CUDA.
// CUDA: logits f32 or bf16 (widened exactly, fp32 math as on the CPU), every
//   tensor on the device; tokens and logprobs are written by the kernel and
//   nothing is copied to the host. The token equals the CPU op's except
//   where u falls within float rounding of a CDF boundary (the two backends
//   round exp and order their double sums differently); greedy always
//   equals. Non-finite logits raise the device flag (site sampling) and give
//   token 0, log-prob NaN for that row.
void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor rng_streams,
                   Tensor rng_counters, const SamplingParams& p);

namespace cpu {
void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor rng_streams,
                   Tensor rng_counters, const SamplingParams& p);
}  // namespace cpu

// CUDA builds only.
namespace cuda {
void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor rng_streams,
                   Tensor rng_counters, const SamplingParams& p);
// out (B, 4) i32 (the u32 words): philox_draw(seed, rng_streams[b],
// rng_counters[b]) computed on the device, for tests that the device draw
// has the host's bits.
void philox_draws(const Ctx& ctx, Tensor out, Tensor rng_streams, Tensor rng_counters, uint64_t seed);
}  // namespace cuda

}  // namespace dapo::ops
