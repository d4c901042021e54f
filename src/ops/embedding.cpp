// Backend dispatch of the (vocab-parallel) token embedding.
#include "dapo/ops/embedding.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void embedding_forward(const Ctx& ctx, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start) {
  DAPO_DISPATCH(ctx, embedding_forward, out, ids, weight, vocab_start);
}

void embedding_backward(const Ctx& ctx, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start) {
  DAPO_DISPATCH(ctx, embedding_backward, dweight, dout, ids, vocab_start);
}

}  // namespace dapo::ops
