// Backend dispatch of the fused gate/up products and SwiGLU.
#include "dapo/ops/linear_swiglu.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void linear_swiglu_forward(const Ctx& ctx, Tensor h, Tensor gate, Tensor up, Tensor in, Tensor w_gate,
                           Tensor w_up) {
  DAPO_DISPATCH(ctx, linear_swiglu_forward, h, gate, up, in, w_gate, w_up);
}

}  // namespace dapo::ops
