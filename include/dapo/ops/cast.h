// Element type conversion between the fp32 master weights and the bf16
// compute copy (and back, e.g. for bf16 activations read by fp32 code), plus
// a plain copy when the dtypes agree.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out = in converted to out's dtype, element by element.
// out, in: the same shape (any rank), dtypes one of
//   f32 -> bf16  round to nearest, ties to even (core/bf16.h): inf stays inf,
//                finite values above the bf16 range round to inf, NaN stays
//                a (quiet) NaN with its sign, -0 stays -0;
//   bf16 -> f32  exact;
//   T -> T       a copy, for any dtype T.
// out is overwritten. out may be in itself only for T -> T (then nothing
// happens); otherwise out and in must not overlap.
void cast(const Ctx& ctx, Tensor out, Tensor in);

// CUDA backend: the same pairs and the same bits (NaN payloads too);
// both tensors on the device; T -> T is a cudaMemcpyAsync on the stream.

}  // namespace dapo::ops
