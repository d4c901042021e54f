// Host-side access to optimizer buffers that may live on a GPU: zeroing,
// and copies between host memory and a buffer, on the ops stream. Private
// to the optim module; CUDA builds only touch the CUDA runtime here.
#pragma once

#include <cstdint>

#include "dapo/core/tensor.h"
#include "dapo/ops/context.h"

namespace dapo::optim::detail {

// All on `stream` (cudaStream_t; the rank's compute stream, which the
// legacy default stream would not be ordered with).
void fill_zero(Device device, void* stream, float* p, int64_t n);
// n floats; the device side is `buffer`. Synchronous: they wait for the
// stream, so the values are those the ops wrote.
void copy_to_host(void* stream, Device device, float* host, const float* buffer, int64_t n);
void copy_from_host(void* stream, Device device, float* buffer, const float* host, int64_t n);

}  // namespace dapo::optim::detail
