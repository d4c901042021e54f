// Backend dispatch of token sampling and of its tp shard steps.
#include "dapo/ops/sampling.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                   Tensor rng_streams, Tensor rng_counters, const SamplingParams& p) {
  DAPO_DISPATCH(ctx, sample_tokens, tokens, logprobs, logits, logit_rows, rng_streams, rng_counters, p);
}

int64_t detail::check_sampled_rows(const Tensor& tokens, const Tensor& logprobs, const Tensor& rng_streams,
                                   const Tensor& rng_counters) {
  const int64_t R = tokens.numel();
  DAPO_CHECK_SHAPE(tokens, {R});
  DAPO_CHECK_SHAPE(logprobs, {R});
  DAPO_CHECK_SHAPE(rng_streams, {R});
  DAPO_CHECK_SHAPE(rng_counters, {R});
  DAPO_CHECK_DTYPE(tokens, DType::i32);
  DAPO_CHECK_DTYPE(logprobs, DType::f32);
  DAPO_CHECK_DTYPE(rng_streams, DType::i64);
  DAPO_CHECK_DTYPE(rng_counters, DType::i64);
  return R;
}

size_t sample_tokens_gpu_scratch_bytes(int64_t R) {
  return size_t(R) * 32 * (sizeof(float) + sizeof(double)) + 2 * Arena::kAlign;
}

void sampling_shard_max(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, float temperature) {
  DAPO_DISPATCH(ctx, sampling_shard_max, out, logits, logit_rows, temperature);
}

void sampling_shard_sum(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m, float temperature) {
  DAPO_DISPATCH(ctx, sampling_shard_sum, out, logits, logit_rows, m, temperature);
}

void sampling_select_begin(const Ctx& ctx, Tensor select, const SamplingParams& p, int phase, int64_t vocab) {
  DAPO_DISPATCH(ctx, sampling_select_begin, select, p, phase, vocab);
}

void sampling_shard_histogram(const Ctx& ctx, Tensor hist, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select, int level) {
  DAPO_DISPATCH(ctx, sampling_shard_histogram, hist, logits, logit_rows, m, temperature, select, level);
}

void sampling_descend(const Ctx& ctx, Tensor select, Tensor hist, int level, float top_p) {
  DAPO_DISPATCH(ctx, sampling_descend, select, hist, level, top_p);
}

void sampling_shard_tie_count(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  DAPO_DISPATCH(ctx, sampling_shard_tie_count, out, logits, logit_rows, m, temperature, select);
}

void sampling_shard_tie_limit(const Ctx& ctx, Tensor select, Tensor tie_counts, int rank, Tensor logits,
                              Tensor logit_rows, Tensor m, float temperature) {
  DAPO_DISPATCH(ctx, sampling_shard_tie_limit, select, tie_counts, rank, logits, logit_rows, m, temperature);
}

void sampling_shard_kept_mass(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  DAPO_DISPATCH(ctx, sampling_shard_kept_mass, out, logits, logit_rows, m, temperature, select);
}

void sampling_shard_choose(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                           Tensor m, Tensor select, Tensor sums, Tensor kept, Tensor rng_streams,
                           Tensor rng_counters, const SamplingParams& p, int rank, int64_t vocab_start) {
  DAPO_DISPATCH(ctx, sampling_shard_choose, tokens, logprobs, logits, logit_rows, m, select, sums, kept,
                rng_streams, rng_counters, p, rank, vocab_start);
}

}  // namespace dapo::ops
