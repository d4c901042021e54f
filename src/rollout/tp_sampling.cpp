// sample_tokens_tp: the shard steps of ops/sampling.h and the collectives
// between them (see tp_sampling.h for what crosses ranks).
#include "dapo/rollout/tp_sampling.h"

#include "dapo/core/arena.h"
#include "dapo/core/error.h"
#include "dapo/ops/sampling_select.h"

namespace dapo::rollout {
namespace {

// Rank `rank`'s block (R) of a gathered (tp, R) tensor.
Tensor block_of(Tensor gathered, int rank) {
  const int64_t R = gathered.size(1);
  return Tensor(static_cast<char*>(gathered.data) + size_t(rank * R) * dtype_size(gathered.dtype), gathered.dtype,
                {R}, gathered.device);
}

// all_gather of every rank's block (R) into the (tp, R) tensor, in place.
void gather_blocks(const parallel::Comm& tp, Tensor gathered, void* stream) {
  const Tensor flat(gathered.data, gathered.dtype, {gathered.numel()}, gathered.device);
  tp.all_gather(flat, block_of(gathered, tp.rank()), stream);
}

}  // namespace

void sample_tokens_tp(const ops::Ctx& ctx, const parallel::Comm& tp, Tensor tokens, Tensor logprobs,
                      Tensor logits, Tensor logit_rows, Tensor rng_streams, Tensor rng_counters,
                      const ops::SamplingParams& p, int64_t vocab_start) {
  if (tp.size() == 1)
    return ops::sample_tokens(ctx, tokens, logprobs, logits, logit_rows, rng_streams, rng_counters, p);
  DAPO_CHECK(logits.ndim == 2, "sample_tokens_tp: logits must be (B, V / tp), got ", logits.shape_string());
  const int64_t R = tokens.numel(), vocab = logits.size(1) * tp.size();
  const int P = tp.size(), rank = tp.rank();
  if (R == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "sample_tokens_tp needs ctx.scratch");
  namespace sd = ops::detail;
  ArenaScope scope(*ctx.scratch);
  Arena& a = *ctx.scratch;
  void* stream = ctx.stream;
  Tensor m = a.alloc(DType::f32, {R});
  Tensor sums = a.alloc(DType::i64, {int64_t(P), R});
  Tensor kept = a.alloc(DType::i64, {int64_t(P), R});
  Tensor ties = a.alloc(DType::i64, {int64_t(P), R});
  Tensor select = a.alloc(DType::i64, {R, sd::kSelectWords});
  Tensor hist = a.alloc(DType::i64, {R, 2, sd::kMaxBins});
  const float T = p.temperature;

  ops::sampling_shard_max(ctx, m, logits, logit_rows, T);
  tp.all_reduce(m, parallel::ReduceOp::max, stream);
  ops::sampling_shard_sum(ctx, block_of(sums, rank), logits, logit_rows, m, T);
  gather_blocks(tp, sums, stream);

  if (T == 0.0f) {
    ops::SamplingParams none = p;
    none.top_k = 0;
    none.top_p = 1.0f;
    ops::sampling_select_begin(ctx, select, none, 0, vocab);
    ops::sampling_shard_choose(ctx, tokens, logprobs, logits, logit_rows, m, select, sums, kept, rng_streams,
                               rng_counters, p, rank, vocab_start);
    tp.all_reduce(tokens, parallel::ReduceOp::min, stream);  // the lowest id of the global max
    return;  // the log-prob is the same on every rank
  }

  const bool use_k = p.top_k > 0 && int64_t(p.top_k) < vocab, use_p = p.top_p < 1.0f;
  const int phases = int(use_k) + int(use_p);
  ops::sampling_select_begin(ctx, select, p, 0, vocab);
  for (int phase = 0; phase < phases; ++phase) {
    if (phase == 1) ops::sampling_select_begin(ctx, select, p, 1, vocab);
    for (int level = 0; level < sd::kLevels; ++level) {
      ops::sampling_shard_histogram(ctx, hist, logits, logit_rows, m, T, select, level);
      tp.all_reduce(hist, parallel::ReduceOp::sum, stream);
      ops::sampling_descend(ctx, select, hist, level, p.top_p);
    }
    ops::sampling_shard_tie_count(ctx, block_of(ties, rank), logits, logit_rows, m, T, select);
    gather_blocks(tp, ties, stream);
    ops::sampling_shard_tie_limit(ctx, select, ties, rank, logits, logit_rows, m, T);
  }
  ops::sampling_shard_kept_mass(ctx, block_of(kept, rank), logits, logit_rows, m, T, select);
  gather_blocks(tp, kept, stream);
  ops::sampling_shard_choose(ctx, tokens, logprobs, logits, logit_rows, m, select, sums, kept, rng_streams,
                             rng_counters, p, rank, vocab_start);
  // One rank holds each row's token and log-prob; the others wrote -1 and -inf.
  tp.all_reduce(tokens, parallel::ReduceOp::max, stream);
  tp.all_reduce(logprobs, parallel::ReduceOp::max, stream);
}

}  // namespace dapo::rollout
