// Backend dispatch of causal GQA attention over packed sequences.
#include "dapo/ops/attention.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void attention_forward(const Ctx& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                       Tensor cu_seqlens, int64_t max_seqlen, float scale) {
  DAPO_DISPATCH(ctx, attention_forward, out, lse, q, k, v, cu_seqlens, max_seqlen, scale);
}

void attention_backward(const Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                        Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens, int64_t max_seqlen,
                        float scale) {
  DAPO_DISPATCH(ctx, attention_backward, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, max_seqlen,
                         scale);
}

}  // namespace dapo::ops
