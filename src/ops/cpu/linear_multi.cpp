// CPU reference of linear_forward_multi: one linear_forward per segment.

#include "dapo/ops/matmul.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops::cpu {

// The contract is checked by ops::linear_forward_multi (or the op whose
// products these are: qkv_rope_kv_write); linear_forward keeps to f32.
void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  for (const LinearSegment& s : segments) cpu::linear_forward(ctx, s.out, in, s.weight, s.bias);
}

}  // namespace dapo::ops::cpu
