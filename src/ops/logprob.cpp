// Log-probabilities and entropy of logits: the contract of logprob.h,
// checked once, then the backend.
#include "dapo/ops/logprob.h"

#include <cmath>

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;

void check_logits(const char* op, const Tensor& logits, float inv_temperature) {
  detail::check_float(op, logits, "logits");
  DAPO_CHECK(logits.ndim == 2, op, ": logits must be (N, V), got ", logits.shape_string());
  DAPO_CHECK(inv_temperature > 0.0f && std::isfinite(inv_temperature), "inv_temperature ", inv_temperature,
             " must be positive and finite");
}

// t is f32 of shape dims.
void check_f32(const char* op, const Tensor& t, std::initializer_list<int64_t> dims, const char* name) {
  check_dtype(op, t, DType::f32, name);
  DAPO_CHECK(::dapo::detail::shape_is(t, dims), op, ": ", name, " has shape ", t.shape_string(), ", expected ",
             ::dapo::detail::dims_string(dims));
}

void check_targets(const char* op, const Tensor& targets, int64_t N, int64_t vocab_start) {
  check_dtype(op, targets, DType::i32, "targets");
  DAPO_CHECK_SHAPE(targets, {N});
  DAPO_CHECK(vocab_start >= 0, "vocab_start ", vocab_start);
}

}  // namespace

void logits_row_max(const Ctx& ctx, Tensor row_max, Tensor logits, float inv_temperature) {
  check_logits("logits_row_max", logits, inv_temperature);
  check_f32("logits_row_max", row_max, {logits.shape[0]}, "row_max");
  DAPO_DISPATCH(ctx, logits_row_max, row_max, logits, inv_temperature);
}

void logits_partial_sums(const Ctx& ctx, Tensor sums, Tensor logits, Tensor targets, Tensor row_max,
                         int64_t vocab_start, float inv_temperature) {
  const char* op = "logits_partial_sums";
  check_logits(op, logits, inv_temperature);
  const int64_t N = logits.shape[0];
  check_f32(op, sums, {N, 3}, "sums");
  check_targets(op, targets, N, vocab_start);
  check_f32(op, row_max, {N}, "row_max");
  DAPO_DISPATCH(ctx, logits_partial_sums, sums, logits, targets, row_max, vocab_start, inv_temperature);
}

void logprob_entropy_finish(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor sums,
                            Tensor row_max) {
  const char* op = "logprob_entropy_finish";
  DAPO_CHECK(row_max.ndim == 1, op, ": row_max ", row_max.shape_string(), " must be (N)");
  const int64_t N = row_max.shape[0];
  check_f32(op, row_max, {N}, "row_max");
  check_f32(op, sums, {N, 3}, "sums");
  check_f32(op, logprob, {N}, "logprob");
  check_f32(op, entropy, {N}, "entropy");
  check_f32(op, lse, {N}, "lse");
  DAPO_DISPATCH(ctx, logprob_entropy_finish, logprob, entropy, lse, sums, row_max);
}

void logprob_entropy_forward(const Ctx& ctx, Tensor logprob, Tensor entropy, Tensor lse, Tensor logits,
                             Tensor targets, int64_t vocab_start, float inv_temperature) {
  const char* op = "logprob_entropy_forward";
  check_logits(op, logits, inv_temperature);
  const int64_t N = logits.shape[0];
  check_targets(op, targets, N, vocab_start);
  check_f32(op, logprob, {N}, "logprob");
  check_f32(op, entropy, {N}, "entropy");
  check_f32(op, lse, {N}, "lse");
  DAPO_DISPATCH(ctx, logprob_entropy_forward, logprob, entropy, lse, logits, targets, vocab_start,
                inv_temperature);
}

void logprob_entropy_backward(const Ctx& ctx, Tensor dlogits, Tensor dlogprob, Tensor dentropy,
                              Tensor logits, Tensor targets, Tensor lse, Tensor entropy,
                              int64_t vocab_start, float inv_temperature) {
  const char* op = "logprob_entropy_backward";
  check_logits(op, logits, inv_temperature);
  const int64_t N = logits.shape[0];
  // dlogits: the logits' dtype, or bf16 from f32 logits (then apart from them).
  const bool narrowed = dlogits.dtype == DType::bf16 && logits.dtype == DType::f32;
  DAPO_CHECK(dlogits.same_shape(logits) && (dlogits.dtype == logits.dtype || narrowed), "dlogits ",
             dlogits.shape_string(), " ", dtype_name(dlogits.dtype), " vs logits ", logits.shape_string(), " ",
             dtype_name(logits.dtype));
  if (narrowed) detail::check_outputs_apart(op, {{dlogits, "dlogits"}}, {{logits, "logits"}});
  check_targets(op, targets, N, vocab_start);
  check_f32(op, lse, {N}, "lse");
  check_f32(op, entropy, {N}, "entropy");
  if (dlogprob.defined()) check_f32(op, dlogprob, {N}, "dlogprob");
  if (dentropy.defined()) check_f32(op, dentropy, {N}, "dentropy");
  DAPO_DISPATCH(ctx, logprob_entropy_backward, dlogits, dlogprob, dentropy, logits, targets, lse, entropy,
                vocab_start, inv_temperature);
}

}  // namespace dapo::ops
