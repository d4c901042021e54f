// SwiGLU's sigmoid, shared by every kernel that applies it (swiglu.cu, the
// fused products linear_swiglu.cu and linear_swiglu_wide.cu), so that the
// fused and unfused paths round alike.
//
// 1 / (1 + 2^(-g log2 e)) with the hardware's approximate exp2 and
// reciprocal (one MUFU instruction each, flushing denormals): within a few
// fp32 ulps of the exact value, far below the bf16 rounding of h that
// follows. The IEEE reciprocal (rcp.rn) and the denormal-preserving exp it
// replaces took the prefill's fused epilogue several times as many
// instructions, and that epilogue runs on a few warps of an SM busy with
// products (linear_swiglu_wide.cu).
#pragma once

namespace dapo::ops::cuda::detail {

__device__ __forceinline__ float swiglu_sigmoid(float g) {
  float e, s;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(e) : "f"(g * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(s) : "f"(1.0f + e));
  return s;
}

}  // namespace dapo::ops::cuda::detail
