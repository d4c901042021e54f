// Host side of the TMA kernels: tensor maps of row-major bf16 matrices read
// in boxes of 64 of K (128 bytes) by `box_rows` rows, in the 128-byte swizzle
// that the wgmma shared-memory descriptors (wgmma_ptx.cuh) read.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace dapo::ops::cuda::detail {

// A map of `rows` x K bf16 at `base` (16-byte aligned, K % 8 == 0), boxes of
// 64 x box_rows (1..256); out-of-range rows and K read as zeros (and count
// toward a box's transaction bytes like the rest).
CUtensorMap tma_box_map_bf16(const void* base, int64_t rows, int64_t K, int box_rows);

}  // namespace dapo::ops::cuda::detail
