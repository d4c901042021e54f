// Backend dispatch of the rotary position embedding op.
#include "dapo/ops/rope.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta) {
  DAPO_DISPATCH(ctx, rope_forward, out, in, positions, theta);
}

void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta) {
  DAPO_DISPATCH(ctx, rope_backward, din, dout, positions, theta);
}

}  // namespace dapo::ops
