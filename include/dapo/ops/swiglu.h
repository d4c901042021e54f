// SwiGLU activation of Qwen2's MLP: out = silu(gate) * up, elementwise.
// gate and up are the outputs of the column-parallel gate_proj / up_proj
// (each rank holds its slice of the intermediate size I).
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out, gate, up: (N, I); f32 on the CPU backend, f32 or bf16 on CUDA.
void swiglu_forward(const Ctx& ctx, Tensor out, Tensor gate, Tensor up);
// dgate, dup: (N, I), overwritten; dout, gate, up: (N, I).
void swiglu_backward(const Ctx& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up);

// CUDA backend: f32 or bf16 tensors (all the same dtype), fp32 math.

}  // namespace dapo::ops
