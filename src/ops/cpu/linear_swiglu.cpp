// CPU fused gate/up + SwiGLU: the two ops it stands for, through the
// caller's gate and up scratch.
#include "dapo/ops/matmul.h"

#include "dapo/ops/swiglu.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops::cpu {

// The contract is checked by ops::linear_swiglu_forward; the ops it stands
// for keep to f32.
void linear_swiglu_forward(const Ctx& ctx, Tensor h, Tensor gate, Tensor up, Tensor in, Tensor w_gate,
                           Tensor w_up, const RowNorm& rn) {
  if (rn.active()) cpu::row_norm_apply(ctx, in, rn);
  const LinearSegment segs[] = {{gate, w_gate, Tensor{}}, {up, w_up, Tensor{}}};
  cpu::linear_forward_multi(ctx, in, segs);
  cpu::swiglu_forward(ctx, h, gate, up);
}

}  // namespace dapo::ops::cpu
