// device_runtime.h over the CUDA runtime API (CUDA builds).
#include <cuda_runtime_api.h>

#include "dapo/core/device_runtime.h"
#include "dapo/core/error.h"

namespace dapo::device_runtime {
namespace {

void check(cudaError_t err, const char* call, const char* what) {
  DAPO_CHECK(err == cudaSuccess, call, " (", what, "): ", cudaGetErrorString(err));
}

cudaMemcpyKind kind_of(CopyKind k) {
  switch (k) {
    case CopyKind::host_to_device: return cudaMemcpyHostToDevice;
    case CopyKind::device_to_host: return cudaMemcpyDeviceToHost;
    case CopyKind::device_to_device: break;
  }
  return cudaMemcpyDeviceToDevice;
}

}  // namespace

bool available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  DAPO_CHECK(err == cudaSuccess, "cudaMalloc of ", bytes, " bytes: ", cudaGetErrorString(err));
  return p;
}

void free(void* p) {
  if (p != nullptr) check(cudaFree(p), "cudaFree", "device memory");
}

void* alloc_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  DAPO_CHECK(err == cudaSuccess, "cudaHostAlloc of ", bytes, " bytes: ", cudaGetErrorString(err));
  return p;
}

void free_pinned(void* p) {
  if (p != nullptr) check(cudaFreeHost(p), "cudaFreeHost", "pinned host memory");
}

size_t memory_free() {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", "free memory");
  return free;
}

size_t memory_total() {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", "total memory");
  return total;
}

void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream, const char* what) {
  check(cudaMemcpyAsync(dst, src, bytes, kind_of(kind), static_cast<cudaStream_t>(stream)), "cudaMemcpyAsync", what);
}

void memset_async(void* dst, int value, size_t bytes, void* stream, const char* what) {
  check(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)), "cudaMemsetAsync", what);
}

void synchronize(void* stream, const char* what) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize", what);
}

}  // namespace dapo::device_runtime
