// Fill: every element of a tensor set to one value - zero_grad, buffer
// initialisation - as an op on the backend's stream rather than a host loop
// or a stray cudaMemset outside the stream order.
#pragma once

#include <cstdint>

#include "dapo/ops/context.h"

namespace dapo::ops {

// t: any shape, f32, bf16, i32 or i64; OVERWRITTEN with value converted to
// t's dtype: f32 rounds the double to nearest; bf16 rounds it to f32, then
// to bf16 as ops::cast does (ties to even); i32 and i64 need a whole number
// in the dtype's range (anything else is a bug and fails).
// Backends: both. On CUDA a value whose bytes are all equal (0, -1) is one
// cudaMemsetAsync, anything else a kernel with 16-byte stores.
void fill(const Ctx& ctx, Tensor t, double value);

// CUDA backend: the same dtypes; t on the device.

}  // namespace dapo::ops
