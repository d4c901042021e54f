// Per-token log-probability of the target token and entropy of the policy's
// next-token distribution, straight from the LM head's logits, without ever
// materialising the (N, V) probabilities.
//
// With z = logits * inv_temperature (inv_temperature = 1 / the sampling
// temperature, so that the trainer scores exactly the distribution the
// sampler drew from) and p = softmax(z):
//   lse      = log sum_v exp(z_v)
//   logprob  = z_target - lse                     (log p_target)
//   entropy  = -sum_v p_v log p_v = lse - E_p[z]
//
// Vocabulary-parallel (Megatron style): under tensor parallelism each rank
// holds logits (N, V_local) of the vocab ids [vocab_start, vocab_start +
// V_local). The forward then takes three steps with two all-reduces that
// the caller (parallel module) does in between:
//   1. logits_row_max            -> all-reduce MAX of row_max over tp
//   2. logits_partial_sums       -> all-reduce SUM of sums over tp
//   3. logprob_entropy_finish
// With one shard (tp = 1), logprob_entropy_forward does all three in a single
// streaming pass over each row (online softmax). The backward needs only the
// global lse and entropy, so every shard computes its own slice of dlogits
// with no communication.
//
// All tensors f32 except targets (i32), contiguous, on the backend's device.
// CUDA also takes bf16 logits (and then bf16 dlogits); every other tensor
// stays f32, the math is fp32. Outputs are overwritten. Targets are global
// vocab ids >= 0.
//
// Bad inputs: the CPU op fails on a negative target (and, in the single-shard
// forward, on one outside the shard). The CUDA op records them in the device
// flags instead (FlagSite::logprob, device_flags.h): a bad target as a bad
// id (the forward's logprob of that row is then NaN), NaN or +inf logits as
// a non-finite row (passes 1 and 3 and the single-shard forward), and the
// host reports them at the next check_flags.
//
// CUDA determinism: a row is cut into fixed chunks (16384 bf16 / 8192 f32),
// one CTA each, merged per row in chunk order; the same inputs give the same
// bits on the same GPU.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// Pass 1. row_max (N) = max_v z[n, v] over this shard (-inf when V_local is 0).
// logits (N, V_local). inv_temperature > 0.
void logits_row_max(const Ctx& ctx, Tensor row_max, Tensor logits, float inv_temperature);

// Pass 2. With m = row_max (N), the GLOBAL max after the all-reduce:
//   sums[n, 0] = sum_v exp(z - m)
//   sums[n, 1] = sum_v exp(z - m) * (z - m)
//   sums[n, 2] = z[n, target - vocab_start] - m if this shard holds target, else 0
// sums (N, 3); logits (N, V_local); targets (N) i32 global ids.
// Every column is additive over shards, so an all-reduce SUM gives the sums of
// the whole vocabulary. Column 1 and 2 are taken relative to m (not the
// raw z of a textbook formula): lse - E[z] then never cancels two large
// numbers, which keeps the entropy accurate for logits in the thousands.
void logits_partial_sums(const Ctx& ctx, Tensor sums, Tensor logits, Tensor targets, Tensor row_max,
                         int64_t vocab_start, float inv_temperature);

// Pass 3, from the all-reduced sums (N, 3) and the global row_max (N):
//   lse = m + log(s0); logprob = s2 - log(s0); entropy = log(s0) - s1 / s0.
// logprob, entropy, lse: (N). lse is what the backward needs.
void logprob_entropy_finish(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor sums,
                            Tensor row_max);

// The single-shard forward: logits (N, V) hold the whole vocabulary (ids from
// vocab_start, normally 0) and each row streams through the cache once, in
// chunks, with a running max. logprob, entropy, lse: (N); targets (N) i32 in
// [vocab_start, vocab_start + V).
void logprob_entropy_forward(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor logits,
                             Tensor targets, int64_t vocab_start, float inv_temperature);

// Backward of both outputs for this shard. With p = exp(z - lse) and
// H = entropy (the global values from the forward):
//   dz = dlogprob * (onehot(target) - p) - dentropy * p * (log p + H)
//   dlogits = inv_temperature * dz
// dlogits (N, V_local), OVERWRITTEN; dlogprob (N), dentropy (N): upstream
// gradients, either may be an empty Tensor{} (data == nullptr) meaning zero;
// logits (N, V_local); targets (N) i32; lse (N); entropy (N).
// dlogits may be logits itself (in place: each element is read before it is
// written), which saves the second (N, V_local) buffer; any other overlap is
// not allowed. On CUDA dlogits has the logits' dtype, or is bf16 from f32
// logits (the trainer's fp32 LM head feeding its bf16 GEMMs), then apart
// from them.
void logprob_entropy_backward(const Ctx& ctx, Tensor dlogits, Tensor dlogprob, Tensor dentropy,
                              Tensor logits, Tensor targets, Tensor lse, Tensor entropy,
                              int64_t vocab_start, float inv_temperature);

// CUDA backend: logits f32 or bf16, dlogits the same or bf16, all else f32
// (targets i32).

}  // namespace dapo::ops
