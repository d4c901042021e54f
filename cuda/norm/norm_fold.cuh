// Device side of the folded norm (norm_fold.h), shared by the kernels that
// consume a RowNorm (linear_multi.cu, linear_swiglu.cu, norm_fold.cu): one
// row's rstd from its parts, summed in the header's order, so every kernel
// computes the same bits for the same row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "dapo/ops/norm_fold.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda::detail {

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

// A RowNorm as a kernel argument. ssq null: none.
struct RowNormArgs {
  const float* ssq;  // (M, parts)
  int32_t parts;
  float inv_c, eps;
};

// The kernel argument of an optional RowNorm over M rows of K columns (its
// shape checked for `op`); null ssq when rn is null or inactive.
inline RowNormArgs row_norm_args(const Ctx& ctx, const RowNorm* rn, int64_t M, int64_t K, const char* op) {
  RowNormArgs a{};
  if (rn == nullptr || !rn->active()) return a;
  ops::detail::check_row_norm(*rn, M, K, op);
  check_device(ctx, rn->ssq, "row-norm ssq");
  a.ssq = rn->ssq.ptr<float>();
  a.parts = int32_t(norm_fold_parts(K));
  a.inv_c = 1.0f / float(K);
  a.eps = rn->eps;
  return a;
}

__device__ __forceinline__ float row_rstd(const RowNormArgs& rn, int m) {
  return row_rstd(rn.ssq, rn.parts, m, rn.inv_c, rn.eps);
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

}  // namespace dapo::ops::cuda::detail
