// Backend dispatch of the LM head fused with sampling, and the rules every
// backend shares.
#include "dapo/ops/lm_head_sample.h"

#include <algorithm>
#include <cmath>

#include "dapo/core/arena.h"
#include "src/ops/dispatch.h"
#include "src/ops/cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops {
namespace {

// The contract of lm_head_sample.h, both backends; returns R.
int64_t check_lm_head_sample(const Tensor& tokens, const Tensor& logprobs, const Tensor& hidden,
                                     const Tensor& weight, const Tensor& logit_rows, const Tensor& rng_streams,
                                     const Tensor& rng_counters, const SamplingParams& p) {
  DAPO_CHECK(hidden.ndim == 2 && weight.ndim == 2 && hidden.shape[1] == weight.shape[1],
             "lm_head_sample: hidden ", hidden.shape_string(), " and weight ", weight.shape_string(),
             " must be (B, C) and (V, C)");
  DAPO_CHECK(hidden.dtype == weight.dtype, "lm_head_sample: hidden is ", dtype_name(hidden.dtype), ", weight ",
             dtype_name(weight.dtype));
  const int64_t B = hidden.shape[0], V = weight.shape[0];
  DAPO_CHECK(V >= 1 && V <= (int64_t(1) << 30), "lm_head_sample: vocabulary of ", V);
  const int64_t R = detail::check_sampled_rows(tokens, logprobs, rng_streams, rng_counters);
  if (has_logit_rows(logit_rows)) {
    DAPO_CHECK_SHAPE(logit_rows, {R});
    DAPO_CHECK_DTYPE(logit_rows, DType::i32);
  } else {
    DAPO_CHECK(R == B, "lm_head_sample: ", R, " sampled rows of ", B, " hidden rows need logit_rows");
  }
  DAPO_CHECK(p.temperature > 0.0f && std::isfinite(p.temperature), "lm_head_sample: temperature ", p.temperature,
             " (greedy rows take the head and sample_tokens)");
  DAPO_CHECK(!(p.top_k > 0 && int64_t(p.top_k) < V) && !(p.top_p < 1.0f), "lm_head_sample: top_k ", p.top_k,
             ", top_p ", p.top_p, ": truncated rows take the head and sample_tokens");
  return R;
}

}  // namespace

void lm_head_sample(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor hidden, Tensor weight, Tensor logit_rows,
                    Tensor rng_streams, Tensor rng_counters, const SamplingParams& p, const RowNorm& norm) {
  check_lm_head_sample(tokens, logprobs, hidden, weight, logit_rows, rng_streams, rng_counters, p);
  if (norm.active()) detail::check_row_norm(norm, hidden.shape[0], hidden.shape[1], "lm_head_sample");
  detail::check_devices(ctx, "lm_head_sample", "norm.ssq", norm.ssq);
  DAPO_DISPATCH(ctx, lm_head_sample, tokens, logprobs, hidden, weight, logit_rows, rng_streams, rng_counters, p,
                norm);
}

size_t lm_head_sample_scratch_bytes(int64_t B, int64_t V) {
  // The parts and the summaries of tiles of at least 128 ids, each row's
  // rounded up to even.
  const int64_t parts = (V + kLmHeadPart - 1) / kLmHeadPart, tiles = (V + 127) / 128;
  return size_t(std::max<int64_t>(B, 1)) * size_t((parts + 1) / 2 * 2 + (tiles + 1) / 2 * 2) * 8 + 3 * Arena::kAlign;
}

bool lm_head_sample_preferred(const Ctx& ctx, const Tensor& hidden, const Tensor& weight, const SamplingParams& p) {
  if (ctx.backend == Backend::cpu) return false;
#ifdef DAPO_WITH_CUDA
  if (!cuda::detail::lm_head_sample_built()) return false;
  if (hidden.dtype != DType::bf16 || weight.dtype != DType::bf16 || hidden.ndim != 2 || weight.ndim != 2) return false;
  const int64_t C = hidden.shape[1], V = weight.shape[0];
  return C == weight.shape[1] && C % 8 == 0 && V >= 1 && V <= kLmHeadMaxVocabCuda && p.temperature > 0.0f &&
         std::isfinite(p.temperature) && !(p.top_k > 0 && int64_t(p.top_k) < V) && !(p.top_p < 1.0f);
#else
  (void)hidden, (void)weight, (void)p;
  return false;
#endif
}

}  // namespace dapo::ops
