// The LM head fused with untruncated sampling: the tokens and log-probs that
//   logits = hidden @ weight^T                       (B, V) f32
//   sample_tokens(tokens, logprobs, logits, logit_rows, rng_streams, rng_counters, p)
// give (sampling.h: temperature > 0, no top-k, no top-p: the DAPO recipe's
// draw), without the logits in memory. At a decode step of Qwen2.5-0.5B
// (128 rows, V = 151,936) the logits are 78 MB of f32 that the head writes
// and the sampler reads back, next to the 272 MB of the head's weight.
//
// CUDA (sm_90a builds, Hopper): the head's products run in a persistent TMA +
// wgmma kernel whose epilogue folds every 16 consecutive ids of a row
// (kLmHeadPart) into (max z, sum of exp(z - max)), z = logit / temperature,
// straight from the accumulators (a fixed shuffle tree), and each tile's
// parts (128 or 192 ids) into a summary of the same kind (merged in id
// order). A second kernel, one CTA a sampled row, rescales the summaries'
// masses to the row max (float exp, summed in double in id order), draws u
// = uniform_float(philox_draw(seed, stream, counter).v[0]) as sample_tokens
// does, finds the tile where the cumulative mass first exceeds u * total,
// then the part inside it, recomputes that part's 16 logits (fp32 dot
// products of the bf16 rows) and walks them in id order from the mass
// before the part; if rounding leaves the part short it goes on into the
// next parts, and takes the last id with a non-zero weight if even the
// row's end is short, as the CPU op does. The log-prob is that of the
// chosen id under the full softmax: z - max - log(total).
//
// Under a folded norm (norm_fold.h) the head kernel scales each row's
// products by its rstd and the walk its recomputed logits.
//
// The token equals the CPU reference's (the composition above) except where
// u falls within rounding of a CDF boundary: the GPU's logits are summed in
// another order than the CPU's, and the walk's recomputed logits in another
// than the parts'. Same inputs, same GPU: the same bits.
//
// NaN or +inf logits raise the device flag (site sampling) and give token 0,
// log-prob NaN, as sample_tokens; so does a logit_rows value outside [0, B).
#pragma once

#include <cstdint>

#include "dapo/ops/context.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/sampling.h"

namespace dapo::ops {

// Ids per part of a row's (max, sum of exp) in the CUDA op.
inline constexpr int64_t kLmHeadPart = 16;
// The CUDA op's largest vocabulary: a row's tile summaries (tiles of at
// least 128 ids) fit the draw's shared memory.
inline constexpr int64_t kLmHeadMaxVocabCuda = int64_t(24576) * 128;

// tokens (R) i32, logprobs (R) f32: OVERWRITTEN.
// hidden (B, C): the LM head's input rows (f32 on the CPU, bf16 on CUDA).
// weight (V, C): the head's weight, HF's layout (same dtype as hidden);
//   CUDA: V up to kLmHeadMaxVocabCuda.
// logit_rows, rng_streams, rng_counters, p: as sample_tokens (sampling.h);
//   p.temperature > 0, p.top_k <= 0 or >= V, p.top_p >= 1.
// norm: a folded norm of the hidden rows (norm_fold.h): row m is
//   hidden[m, :] * rstd_m (the decode step's model.norm, from the last
//   down_proj's epilogue, without a norm kernel); CUDA: at most 256 rows.
// ctx.scratch: CPU: 4 * B * V bytes (the logits), 4 * B * C under a norm
//   (the scaled rows) and sample_tokens' own; CUDA:
//   lm_head_sample_scratch_bytes(B, V).
void lm_head_sample(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor hidden, Tensor weight,
                    Tensor logit_rows, Tensor rng_streams, Tensor rng_counters, const SamplingParams& p,
                    const RowNorm& norm = {});

// The CUDA op's scratch: each of B rows' ceil(V / kLmHeadPart) parts and
// tile summaries (each rounded up to even), 8 bytes each, and alignment.
size_t lm_head_sample_scratch_bytes(int64_t B, int64_t V);

// Whether the fused op can and should replace the head + sample_tokens on
// this backend: CUDA with the sm_90a kernels, bf16 hidden and weight with C
// a multiple of 8, untruncated sampling. Never on the CPU, where the
// composition is what the op runs anyway.
bool lm_head_sample_preferred(const Ctx& ctx, const Tensor& hidden, const Tensor& weight, const SamplingParams& p);

}  // namespace dapo::ops
