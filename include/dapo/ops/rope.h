// Rotary position embedding (RoPE) of Qwen2 / HF transformers, the
// "rotate_half" convention: the head dimension D is split into two halves
// [x1 | x2] and pair (x1[i], x2[i]) is rotated by the angle pos * inv_freq_i,
//   inv_freq_i = 1 / theta^(2i / D),   i in [0, D/2)
//   out[i]       = x[i]       * cos - x[i + D/2] * sin
//   out[i + D/2] = x[i + D/2] * cos + x[i]       * sin
// (not the interleaved GPT-J pairing (x[2i], x[2i+1])).
//
// Numerics: to match HF transformers to fp32 rounding, inv_freq and the
// angle are computed in fp32 the way HF's Qwen2RotaryEmbedding does it:
//   inv_freq = 1.0 / (theta ** (arange(0, D, 2).float() / D))   (fp32 pow, fp32 divide)
//   freqs    = position.float() * inv_freq                      (one fp32 product)
//   cos, sin = cos(freqs), sin(freqs)                           (fp32)
// and out = x*cos + rotate_half(x)*sin with separately rounded products.
// Computing the angle in double would be "more exact" but differs from the
// reference model by up to ~1e-3 radians at positions in the tens of
// thousands, which is larger than the fp32 tolerance the fixtures assume.
//
// Dtypes: the CPU backend takes f32 only. On CUDA, in and out are both bf16
// (production) or both f32, with the same fp32 recipe: inv_freq computed on
// the host by the same code as the CPU's, the fp32 product, precise
// cosf/sinf (sincosf; not the fast __cosf/__sinf, whose error grows with
// the angle), and unfused products; results differ from the CPU's only by
// the last bit of cos/sin (and the bf16 rounding of the output).
//
// Layout: packed tokens (no padding); positions restart at 0 for every
// sequence and are given per token, so one call covers a whole packed batch,
// a chunked prefill and a decode step alike.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// Qwen2.5's rope_theta (config.json); Qwen2-0.5B..7B also use 1e6, older
// Llama-style models 1e4.
inline constexpr float kRopeThetaQwen2 = 1.0e6f;

// out: (T, H, D) f32, overwritten.   in: (T, H, D) f32, D even.
// positions: (T) i32, the position of each token inside its sequence.
// theta: the RoPE base (> 0).
// out may be the same buffer as in (in-place); partial overlap is not allowed.
void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta);

// The gradient of rope_forward: the inverse (transposed) rotation of dout.
// din: (T, H, D) f32, overwritten.   dout: (T, H, D) f32.   positions: (T) i32.
// din may be the same buffer as dout (in-place).
void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta);

namespace cpu {
void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta);
void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta);
}  // namespace cpu

// CUDA builds only: bf16 or f32 as above, D <= 512; in-place as above.
namespace cuda {
void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta);
void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta);
}  // namespace cuda

}  // namespace dapo::ops
