// Shared by the CUDA ops: error checks that report like DAPO_CHECK (file:line,
// rank, host, then abort the job), and small launch helpers. Kernels take raw
// pointers, sizes and the stream; the op wrappers check tensors and status.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dapo/core/error.h"
#include "dapo/ops/context.h"
#include "dapo/ops/device_flags.h"

#define DAPO_CUDA_CHECK(call)                                                                  \
  do {                                                                                         \
    const cudaError_t dapo_cuda_err_ = (call);                                                 \
    if (dapo_cuda_err_ != cudaSuccess) [[unlikely]]                                            \
      ::dapo::fatal(__FILE__, __LINE__, ::dapo::cat(#call ": ", cudaGetErrorName(dapo_cuda_err_), \
                                                    ": ", cudaGetErrorString(dapo_cuda_err_))); \
  } while (0)

#define DAPO_CUBLAS_CHECK(call)                                                                \
  do {                                                                                         \
    const cublasStatus_t dapo_cublas_st_ = (call);                                             \
    if (dapo_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                 \
      ::dapo::fatal(__FILE__, __LINE__, ::dapo::cat(#call ": cuBLAS status ", int(dapo_cublas_st_))); \
  } while (0)

// After a kernel launch: catches bad launch configurations at the call site.
#define DAPO_CUDA_CHECK_LAUNCH() DAPO_CUDA_CHECK(cudaGetLastError())

namespace dapo::ops::cuda {
// Per-device caches owned by CudaDevice and reached through Ctx (no global
// state): cuBLASLt descriptors and heuristics per GEMM shape
// (gemm/gemm_plan_cache.cu). Attention needs none: its splits are planned
// on the host per call (ops/plan/paged_attention_plan.h).
struct GemmPlanCache;
GemmPlanCache* gemm_plan_cache_create();
void gemm_plan_cache_destroy(GemmPlanCache* cache);
}  // namespace dapo::ops::cuda

namespace dapo::ops::cuda::detail {

inline cudaStream_t stream_of(const Ctx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

inline void check_device(const Ctx& ctx, const Tensor& t, const char* name) {
  DAPO_CHECK(ctx.backend == Backend::cuda, "CUDA op called with a non-CUDA context");
  DAPO_CHECK(t.device == Device::cuda || t.numel() == 0, name, " is on the host, expected the GPU");
}

// ceil(a / b) for a >= 0, b > 0: tiles, splits, waves.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline unsigned grid_for(int64_t n, int block) {
  const int64_t blocks = (n + block - 1) / block;
  return unsigned(blocks < 65535 * 32 ? blocks : 65535 * 32);  // kernels loop grid-stride beyond this
}

// Loads as fp32 whatever the storage type; stores rounding to nearest even.
__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store_f32(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f32(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// The current device's SM count (at least 1).
inline int sm_count() {
  int device = 0, sms = 0;
  DAPO_CUDA_CHECK(cudaGetDevice(&device));
  DAPO_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms > 1 ? sms : 1;
}

// Whether p allows 16-byte (128-bit) loads and stores.
inline __host__ __device__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// f32 -> bf16 bits, round to nearest even, NaN kept quiet with its sign:
// core/bf16.h's to_bf16 on the device, so that AdamW's bf16 copy and
// ops::cast give the same bits on both backends, NaN payloads included.
__device__ __forceinline__ uint32_t bf16_bits(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}

// Device flags (device_flags.h): a bad id or a non-finite value is counted,
// and the first one's site, row (and id) kept for the host's report. `f` may
// be null (a Ctx without flags): then nothing is recorded.
__device__ __forceinline__ void flag_bad_id(DeviceFlags* f, FlagSite site, int64_t row, int64_t id) {
  if (f == nullptr) return;
  atomicAdd(&f->bad_id_count, 1);
  if (atomicCAS(&f->bad_id_site, 0, int32_t(site)) == 0) {
    f->bad_id_row = row;
    f->bad_id_value = id;
  }
}
__device__ __forceinline__ void flag_non_finite(DeviceFlags* f, FlagSite site, int64_t row) {
  if (f == nullptr) return;
  atomicAdd(&f->non_finite_count, 1);
  if (atomicCAS(&f->non_finite_site, 0, int32_t(site)) == 0) f->non_finite_row = row;
}

}  // namespace dapo::ops::cuda::detail
