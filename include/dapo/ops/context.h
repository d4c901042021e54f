// Ctx: what every op needs besides its tensors - the backend, the CUDA
// stream and library state (typed, but declared only, so that host code does
// not include CUDA headers), and a scratch arena for temporaries. Ops never allocate
// with malloc; a temporary comes from ctx.scratch and is released before
// the op returns (ArenaScope).
#pragma once

#include "dapo/core/arena.h"
#include "dapo/core/tensor.h"
#include "dapo/ops/device_flags.h"

// cudaStream_t is CUstream_st*: the stream keeps its type without CUDA's headers.
struct CUstream_st;

namespace dapo::ops {

class OpProfiler;
namespace cuda {
struct Libraries;  // cuda/runtime/libraries.h: cuBLASLt handle and workspace, GEMM plans
}  // namespace cuda

enum class Backend : uint8_t { cpu, cuda };

struct Ctx {
  Backend backend = Backend::cpu;
  CUstream_st* stream = nullptr;  // the CUDA backend's stream; nullptr on the CPU
  Arena* scratch = nullptr;       // temporaries on the backend's device
  // CUDA backend only (nullptr on the CPU), all owned by ops::CudaDevice:
  DeviceFlags* flags = nullptr;              // device memory: input problems found by kernels (device_flags.h)
  const cuda::Libraries* libraries = nullptr;  // what cuBLASLt needs, per device
  OpProfiler* profiler = nullptr;  // benchmarks: per-op GPU time (op_profiler.h); nullptr otherwise
  // Batch-invariant arithmetic (rollout.exact_logprobs): every op computes
  // a row's result in an order that does not depend on the other rows of
  // the call, so the engine's cached forward of a token and the trainer's
  // packed forward of it give the same bits. Routes that would sum in
  // another order step aside: on the CPU OpenBLAS (a fixed-order dot
  // instead), on CUDA the kernels for few rows and the fused epilogues (the
  // *_preferred queries say no), cuBLASLt keeps one algorithm for every
  // row count, and paged attention runs the training kernel's arithmetic.
  // Gradients are not covered (nothing compares them).
  bool batch_invariant = false;
};

inline Device backend_device(Backend b) { return b == Backend::cpu ? Device::cpu : Device::cuda; }

}  // namespace dapo::ops
