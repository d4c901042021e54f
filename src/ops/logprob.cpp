// Backend dispatch of the log-prob + entropy op.
#include "dapo/ops/logprob.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void logits_row_max(const Ctx& ctx, Tensor row_max, Tensor logits, float inv_temperature) {
  DAPO_DISPATCH(ctx, logits_row_max, row_max, logits, inv_temperature);
}

void logits_partial_sums(const Ctx& ctx, Tensor sums, Tensor logits, Tensor targets, Tensor row_max,
                         int64_t vocab_start, float inv_temperature) {
  DAPO_DISPATCH(ctx, logits_partial_sums, sums, logits, targets, row_max, vocab_start, inv_temperature);
}

void logprob_entropy_finish(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor sums,
                            Tensor row_max) {
  DAPO_DISPATCH(ctx, logprob_entropy_finish, logprob, entropy, lse, sums, row_max);
}

void logprob_entropy_forward(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor logits,
                             Tensor targets, int64_t vocab_start, float inv_temperature) {
  DAPO_DISPATCH(ctx, logprob_entropy_forward, logprob, entropy, lse, logits, targets, vocab_start,
                inv_temperature);
}

void logprob_entropy_backward(const Ctx& ctx, Tensor dlogits, Tensor dlogprob, Tensor dentropy,
                              Tensor logits, Tensor targets, Tensor lse, Tensor entropy,
                              int64_t vocab_start, float inv_temperature) {
  DAPO_DISPATCH(ctx, logprob_entropy_backward, dlogits, dlogprob, dentropy, logits, targets, lse, entropy,
                vocab_start, inv_temperature);
}

}  // namespace dapo::ops
