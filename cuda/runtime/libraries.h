// What the CUDA library calls of the ops need, one per device (CudaDevice
// owns it; Ctx::libraries points at it).
#pragma once

#include <cublasLt.h>

#include <cstddef>

namespace dapo::ops::cuda {

struct GemmPlanCache;

struct Libraries {
  cublasLtHandle_t cublaslt = nullptr;
  void* workspace = nullptr;  // device memory cuBLASLt may use, workspace_bytes long
  size_t workspace_bytes = 0;
  GemmPlanCache* gemm_plans = nullptr;  // descriptors and heuristic choices per shape (gemm/gemm_plan_cache.cuh)
};

}  // namespace dapo::ops::cuda
