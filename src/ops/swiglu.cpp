// Backend dispatch of the SwiGLU op.
#include "dapo/ops/swiglu.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void swiglu_forward(const Ctx& ctx, Tensor out, Tensor gate, Tensor up) {
  DAPO_DISPATCH(ctx, swiglu_forward, out, gate, up);
}

void swiglu_backward(const Ctx& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) {
  DAPO_DISPATCH(ctx, swiglu_backward, dgate, dup, dout, gate, up);
}

}  // namespace dapo::ops
