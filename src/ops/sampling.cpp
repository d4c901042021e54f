// Token sampling and its tp shard steps: the contracts of sampling.h,
// checked once, then the backend.
#include "dapo/ops/sampling.h"

#include <cmath>
#include <limits>

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "dapo/ops/sampling_select.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;

// The logits every sampling op reads and the rows it samples: logits (B, V)
// f32 or bf16, and logit_rows (R) i32 or, absent, R == B. Returns R.
int64_t check_shard(const char* op, const Tensor& logits, const Tensor& logit_rows, int64_t R) {
  detail::check_float(op, logits, "logits");
  DAPO_CHECK(logits.ndim == 2, op, ": logits must be (B, V), got ", logits.shape_string());
  DAPO_CHECK(logits.shape[1] >= 1 && logits.shape[1] <= std::numeric_limits<int32_t>::max(), op,
             " vocabulary size ", logits.shape[1]);
  if (has_logit_rows(logit_rows)) {
    DAPO_CHECK_SHAPE(logit_rows, {R});
    check_dtype(op, logit_rows, DType::i32, "logit_rows");
  } else {
    DAPO_CHECK(R == logits.shape[0], op, ": ", R, " rows without logit_rows need ", logits.shape[0]);
  }
  return R;
}

void check_select(const char* op, const Tensor& select, int64_t R) {
  DAPO_CHECK_SHAPE(select, {R, detail::kSelectWords});
  check_dtype(op, select, DType::i64, "select");
}

// (R) f32 row maxima.
void check_m(const char* op, const Tensor& m, int64_t R) {
  DAPO_CHECK_SHAPE(m, {R});
  check_dtype(op, m, DType::f32, "m");
}

// Doubles carried in i64 tensors (f64 bits), shaped dims.
void check_f64(const char* op, const Tensor& t, std::initializer_list<int64_t> dims, const char* name) {
  DAPO_CHECK(t.dtype == DType::i64, op, ": ", name, " must be i64 (f64 bits)");
  DAPO_CHECK(::dapo::detail::shape_is(t, dims), op, ": ", name, " has shape ", t.shape_string(), ", expected ",
             ::dapo::detail::dims_string(dims));
}

void check_level(int level) { DAPO_CHECK(level >= 0 && level < detail::kLevels, "level ", level); }

void check_hist(const char* op, const Tensor& hist, int64_t R) {
  DAPO_CHECK_SHAPE(hist, {R, 2, detail::kMaxBins});
  check_dtype(op, hist, DType::i64, "hist");
}

int64_t rows_of(const Tensor& select) { return select.ndim == 2 ? select.shape[0] : 0; }

}  // namespace

void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                   Tensor rng_streams, Tensor rng_counters, const SamplingParams& p) {
  check_shard("sample_tokens", logits, logit_rows, tokens.numel());
  detail::check_sampled_rows(tokens, logprobs, rng_streams, rng_counters);
  DAPO_CHECK(p.temperature >= 0.0f && std::isfinite(p.temperature), "temperature ", p.temperature);
  DAPO_CHECK(p.top_p > 0.0f, "top_p ", p.top_p, " must be > 0 (>= 1 disables it)");
  DAPO_DISPATCH(ctx, sample_tokens, tokens, logprobs, logits, logit_rows, rng_streams, rng_counters, p);
}

// Also used by lm_head_sample (backend_shared.h).
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
  const int64_t R = check_shard("sampling_shard_max", logits, logit_rows, out.numel());
  DAPO_CHECK_SHAPE(out, {R});
  check_dtype("sampling_shard_max", out, DType::f32, "out");
  DAPO_DISPATCH(ctx, sampling_shard_max, out, logits, logit_rows, temperature);
}

void sampling_shard_sum(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m, float temperature) {
  const char* op = "sampling_shard_sum";
  const int64_t R = check_shard(op, logits, logit_rows, out.numel());
  check_f64(op, out, {R}, "out");
  check_m(op, m, R);
  DAPO_DISPATCH(ctx, sampling_shard_sum, out, logits, logit_rows, m, temperature);
}

void sampling_select_begin(const Ctx& ctx, Tensor select, const SamplingParams& p, int phase, int64_t vocab) {
  check_select("sampling_select_begin", select, rows_of(select));
  DAPO_CHECK(phase == 0 || phase == 1, "phase ", phase);
  DAPO_DISPATCH(ctx, sampling_select_begin, select, p, phase, vocab);
}

void sampling_shard_histogram(const Ctx& ctx, Tensor hist, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select, int level) {
  const char* op = "sampling_shard_histogram";
  const int64_t R = check_shard(op, logits, logit_rows, m.numel());
  check_hist(op, hist, R);
  check_m(op, m, R);
  check_select(op, select, R);
  check_level(level);
  DAPO_DISPATCH(ctx, sampling_shard_histogram, hist, logits, logit_rows, m, temperature, select, level);
}

void sampling_descend(const Ctx& ctx, Tensor select, Tensor hist, int level, float top_p) {
  const int64_t R = rows_of(select);
  check_select("sampling_descend", select, R);
  check_hist("sampling_descend", hist, R);
  check_level(level);
  DAPO_DISPATCH(ctx, sampling_descend, select, hist, level, top_p);
}

void sampling_shard_tie_count(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  const char* op = "sampling_shard_tie_count";
  const int64_t R = check_shard(op, logits, logit_rows, out.numel());
  DAPO_CHECK_SHAPE(out, {R});
  check_dtype(op, out, DType::i64, "out");
  check_m(op, m, R);
  check_select(op, select, R);
  DAPO_DISPATCH(ctx, sampling_shard_tie_count, out, logits, logit_rows, m, temperature, select);
}

void sampling_shard_tie_limit(const Ctx& ctx, Tensor select, Tensor tie_counts, int rank, Tensor logits,
                              Tensor logit_rows, Tensor m, float temperature) {
  const char* op = "sampling_shard_tie_limit";
  const int64_t R = check_shard(op, logits, logit_rows, m.numel());
  check_select(op, select, R);
  check_m(op, m, R);
  DAPO_CHECK(tie_counts.ndim == 2 && tie_counts.shape[1] == R && rank >= 0 && rank < tie_counts.shape[0],
             "tie_counts (tp, R) ", tie_counts.shape_string(), " rank ", rank);
  check_dtype(op, tie_counts, DType::i64, "tie_counts");
  DAPO_DISPATCH(ctx, sampling_shard_tie_limit, select, tie_counts, rank, logits, logit_rows, m, temperature);
}

void sampling_shard_kept_mass(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  const char* op = "sampling_shard_kept_mass";
  const int64_t R = check_shard(op, logits, logit_rows, out.numel());
  check_f64(op, out, {R}, "out");
  check_m(op, m, R);
  check_select(op, select, R);
  DAPO_DISPATCH(ctx, sampling_shard_kept_mass, out, logits, logit_rows, m, temperature, select);
}

void sampling_shard_choose(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                           Tensor m, Tensor select, Tensor sums, Tensor kept, Tensor rng_streams,
                           Tensor rng_counters, const SamplingParams& p, int rank, int64_t vocab_start) {
  const char* op = "sampling_shard_choose";
  const int64_t R = check_shard(op, logits, logit_rows, tokens.numel());
  detail::check_sampled_rows(tokens, logprobs, rng_streams, rng_counters);
  check_m(op, m, R);
  check_select(op, select, R);
  DAPO_CHECK(sums.ndim == 2 && sums.shape[1] == R, "sums (tp, R), got ", sums.shape_string());
  const int64_t tp = sums.shape[0];
  DAPO_CHECK(rank >= 0 && rank < tp, "rank ", rank, " of ", tp);
  check_f64(op, sums, {tp, R}, "sums");
  check_f64(op, kept, {tp, R}, "kept");
  DAPO_DISPATCH(ctx, sampling_shard_choose, tokens, logprobs, logits, logit_rows, m, select, sums, kept,
                rng_streams, rng_counters, p, rank, vocab_start);
}

}  // namespace dapo::ops
