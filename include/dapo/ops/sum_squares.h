// Sum of squares of a flat fp32 buffer: this rank's part of the global
// gradient norm, norm = sqrt(all-reduce SUM of sum_squares over the ranks
// that hold distinct gradient elements), used for clipping.
//
// Accumulated in double and deterministic: the buffer is cut into chunks
// whose boundaries depend only on N, each chunk is summed in a fixed order,
// and the chunk sums are added in chunk order, so the result is bit-identical
// for any thread count (and a resumed run clips exactly like the original).
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out: (1) f32, OVERWRITTEN with sum_i x[i]^2 (rounded once, at the end).
// x: any shape, f32, treated as flat (N); N = 0 gives 0.
void sum_squares(const Ctx& ctx, Tensor out, Tensor x);

// CUDA backend: the same dtypes (x and out f32, out on the device); the
// chunks are the GPU's own (at most 4096, one CTA each, partials in double
// in ctx.scratch), so the bits are reproducible on one backend but differ
// from the CPU's in the last places.

}  // namespace dapo::ops
