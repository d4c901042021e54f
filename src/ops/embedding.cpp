// The vocab-parallel embedding: the contract of embedding.h, checked once,
// then the backend.
#include "dapo/ops/embedding.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;

void check_embedding_forward(const Tensor& out, const Tensor& ids, const Tensor& weight, int64_t vocab_start) {
  const char* op = "embedding_forward";
  check_float(op, weight, "weight");
  check_dtype(op, out, weight.dtype, "out");
  check_dtype(op, ids, DType::i32, "ids");
  DAPO_CHECK(ids.ndim == 1 && weight.ndim == 2, op, ": ids ", ids.shape_string(), " must be 1-D and weight ",
             weight.shape_string(), " 2-D");
  DAPO_CHECK_SHAPE(out, {ids.shape[0], weight.shape[1]});
  DAPO_CHECK(vocab_start >= 0, "vocab_start ", vocab_start, " must be >= 0");
  DAPO_CHECK(!overlaps(out, weight) && !overlaps(out, ids), op, ": out overlaps an input");
}

void check_embedding_backward(const Tensor& dweight, const Tensor& dout, const Tensor& ids, int64_t vocab_start) {
  const char* op = "embedding_backward";
  check_dtype(op, dweight, DType::f32, "dweight");
  check_float(op, dout, "dout");
  check_dtype(op, ids, DType::i32, "ids");
  DAPO_CHECK(ids.ndim == 1 && dweight.ndim == 2, op, ": ids ", ids.shape_string(), " must be 1-D and dweight ",
             dweight.shape_string(), " 2-D");
  DAPO_CHECK_SHAPE(dout, {ids.shape[0], dweight.shape[1]});
  DAPO_CHECK(vocab_start >= 0, "vocab_start ", vocab_start, " must be >= 0");
  DAPO_CHECK(!overlaps(dweight, dout) && !overlaps(dweight, ids), op, ": dweight overlaps an input");
}

}  // namespace

void embedding_forward(const Ctx& ctx, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start) {
  check_embedding_forward(out, ids, weight, vocab_start);
  DAPO_DISPATCH(ctx, embedding_forward, out, ids, weight, vocab_start);
}

void embedding_backward(const Ctx& ctx, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start) {
  check_embedding_backward(dweight, dout, ids, vocab_start);
  DAPO_DISPATCH(ctx, embedding_backward, dweight, dout, ids, vocab_start);
}

}  // namespace dapo::ops
