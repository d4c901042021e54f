// CudaDevice: the GPU one rank drives - its streams, the cuBLASLt handle and
// workspace - and the Ctx that sends ops to it. Handles are declared only here,
// so that host code builds without CUDA headers; the definitions are in
// cuda/runtime/cuda_device.cu and exist only in CUDA builds (DAPO_WITH_CUDA).
#pragma once

#include <string>

#include "dapo/ops/context.h"

namespace dapo::ops {

int cuda_device_count();  // 0 when the driver sees none

class CudaDevice {
 public:
  // Binds this thread to GPU `index` and creates a non-blocking stream, a
  // cuBLASLt handle and a workspace of `workspace_bytes` for it, the GEMM
  // plan cache, and the device flags (zeroed). Every op, copy and memset of the rank goes on
  // this stream: nothing uses the legacy default stream, which a
  // non-blocking stream does not order with.
  explicit CudaDevice(int index, size_t workspace_bytes = size_t(32) << 20);
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  // A Ctx for ops on this device; `scratch` must be a device arena.
  Ctx ctx(Arena* scratch) const;
  void synchronize() const;
  // The communication stream: collectives that overlap with compute (the
  // dp gradient buckets) run there, ordered with the compute stream by
  // events in both directions, never by a host wait.
  void* comm_stream() const { return comm_stream_; }
  // Work enqueued on the comm stream from now on starts after everything
  // already enqueued on the compute stream (and the reverse).
  void comm_waits_for_compute() const;
  void compute_waits_for_comm() const;
  // Waits for the stream, reads the device flags (device_flags.h) and, if a
  // kernel recorded a bad id or a non-finite value since the last check,
  // fails like the CPU ops' checks do: one line naming `phase`, the op, the
  // row (and id), the count, then the job aborts. Called at phase
  // boundaries (after a forward, after an update), not per op.
  void check_flags(const char* phase) const;
  // The flags as they stand (after a synchronize), and a reset to zero;
  // tests use these to see that a kernel flags what it should.
  DeviceFlags read_flags() const;
  void clear_flags() const;
  int index() const { return index_; }
  // Bytes of this GPU's memory in use by every process (cudaMemGetInfo:
  // total - free), and its total.
  size_t memory_used() const;
  size_t memory_total() const;
  std::string name() const;

  // Copies on this device's stream, then waits for them (set-up and tests;
  // the hot path keeps data on the device).
  void copy_to_device(Tensor dst, Tensor src) const;
  void copy_to_host(Tensor dst, Tensor src) const;

 private:
  int index_ = 0;
  CUstream_st* stream_ = nullptr;
  cuda::Libraries* libraries_ = nullptr;  // owned
  void* comm_stream_ = nullptr;    // cudaStream_t
  void* compute_done_ = nullptr;   // cudaEvent_t recorded on stream_
  void* comm_done_ = nullptr;      // cudaEvent_t recorded on comm_stream_
  DeviceFlags* flags_ = nullptr;   // device memory
};

}  // namespace dapo::ops
