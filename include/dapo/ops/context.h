// Ctx: what every op needs besides its tensors - the backend, the CUDA
// stream and library handles (opaque here so that host code does not include
// CUDA headers), and a scratch arena for temporaries. Ops never allocate
// with malloc; a temporary comes from ctx.scratch and is released before
// the op returns (ArenaScope).
#pragma once

#include "dapo/core/arena.h"
#include "dapo/core/tensor.h"
#include "dapo/ops/device_flags.h"

namespace dapo::ops {

class OpProfiler;

enum class Backend : uint8_t { cpu, cuda };

struct Ctx {
  Backend backend = Backend::cpu;
  void* stream = nullptr;         // cudaStream_t on the CUDA backend
  void* cublaslt = nullptr;       // cublasLtHandle_t on the CUDA backend
  void* workspace = nullptr;      // cuBLASLt workspace (device), workspace_bytes long
  size_t workspace_bytes = 0;
  Arena* scratch = nullptr;       // temporaries on the backend's device
  // CUDA backend only (nullptr on the CPU), all owned by ops::CudaDevice:
  DeviceFlags* flags = nullptr;   // device memory: input problems found by kernels (device_flags.h)
  void* cudnn = nullptr;          // cudnnHandle_t bound to `stream`
  void* gemm_plans = nullptr;     // cuda::GemmPlanCache*: cuBLASLt descriptors + heuristics per shape
  OpProfiler* profiler = nullptr; // benchmarks: per-op GPU time (op_profiler.h); nullptr otherwise
};

inline Device backend_device(Backend b) { return b == Backend::cpu ? Device::cpu : Device::cuda; }

}  // namespace dapo::ops
