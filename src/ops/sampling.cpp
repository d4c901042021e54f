// Backend dispatch of token sampling.
#include "dapo/ops/sampling.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor rng_streams,
                   Tensor rng_counters, const SamplingParams& p) {
  DAPO_DISPATCH(ctx, sample_tokens, tokens, logprobs, logits, rng_streams, rng_counters, p);
}

}  // namespace dapo::ops
