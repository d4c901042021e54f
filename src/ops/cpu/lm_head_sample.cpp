// CPU lm_head_sample: the composition it stands for, the head into f32
// logits in ctx.scratch, then sample_tokens.
#include "dapo/ops/lm_head_sample.h"

#include "dapo/core/arena.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/matmul.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops::cpu {

// The contract is checked by ops::lm_head_sample.
void lm_head_sample(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor hidden, Tensor weight, Tensor logit_rows,
                    Tensor rng_streams, Tensor rng_counters, const SamplingParams& p, const RowNorm& norm) {
  DAPO_CHECK(ctx.scratch != nullptr, "lm_head_sample needs ctx.scratch (4 * B * V bytes and sample_tokens')");
  const int64_t B = hidden.shape[0], V = weight.shape[0];
  ArenaScope scope(*ctx.scratch);
  if (norm.active()) {
    // The rows the norm stands for, scaled in a copy.
    Tensor scaled = ctx.scratch->alloc(DType::f32, {B, hidden.shape[1]});
    ops::copy(ctx, scaled, hidden);
    cpu::row_norm_apply(ctx, scaled, norm);
    hidden = scaled;
  }
  Tensor logits = ctx.scratch->alloc(DType::f32, {B, V});
  cpu::linear_forward(ctx, logits, hidden, weight, Tensor{});
  cpu::sample_tokens(ctx, tokens, logprobs, logits, logit_rows, rng_streams, rng_counters, p);
}

}  // namespace dapo::ops::cpu
