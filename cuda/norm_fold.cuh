// Device side of the folded norm (norm_fold.h), shared by the kernels that
// consume a RowNorm (linear_multi.cu, linear_swiglu.cu, norm_fold.cu): one
// row's rstd from its parts, summed in the header's order, so every kernel
// computes the same bits for the same row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dapo::ops::cuda_detail {

// rstd of row m from ssq (M, P): 1 / sqrt((ssq[m][0] + ... + ssq[m][P-1]) * inv_c + eps),
// the adds in that order. The row's parts are adjacent: up to 64 of them go
// out as 16-byte loads at once, ahead of the adds, so that a row costs one
// L2 round trip (a consumer that read them one by one, 8 in flight, made
// the 0.5B gate/up product 5 us slower at 128 rows).
__device__ __forceinline__ float row_rstd(const float* ssq, int P, int m, float inv_c, float eps) {
  const float* r = ssq + int64_t(m) * P;
  float total = 0.0f;
  if ((P & 3) == 0 && (reinterpret_cast<uintptr_t>(r) & 15u) == 0) {
    for (int p0 = 0; p0 < P; p0 += 64) {
      float4 v[16];
#pragma unroll
      for (int j = 0; j < 16; ++j)
        if (p0 + 4 * j < P) v[j] = *reinterpret_cast<const float4*>(r + p0 + 4 * j);
#pragma unroll
      for (int j = 0; j < 16; ++j)
        if (p0 + 4 * j < P) total = (((total + v[j].x) + v[j].y) + v[j].z) + v[j].w;
    }
  } else {
    for (int p0 = 0; p0 < P; p0 += 16) {
      float v[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = p0 + j < P ? r[p0 + j] : 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j)
        if (p0 + j < P) total += v[j];
    }
  }
  return 1.0f / sqrtf(__fmaf_rn(total, inv_c, eps));
}

// A named barrier between a CTA's warp that computes rows' rstd, which
// arrives once they are in shared memory, and the consumers, which wait
// for them (`count` threads in all, a multiple of 32; barrier 0 is
// __syncthreads').
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace dapo::ops::cuda_detail
