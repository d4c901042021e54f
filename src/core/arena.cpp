// Bump allocator over one host or device block; see arena.h for the why.
#include "dapo/core/arena.h"

#include <cstdlib>

#ifdef DAPO_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dapo {

void* memory_alloc(Device device, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device == Device::cpu) {
    const size_t rounded = (bytes + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
    void* p = std::aligned_alloc(Arena::kAlign, rounded);
    DAPO_CHECK(p != nullptr, "host allocation of ", bytes, " bytes failed");
    return p;
  }
#ifdef DAPO_WITH_CUDA
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  DAPO_CHECK(err == cudaSuccess, "cudaMalloc of ", bytes, " bytes: ", cudaGetErrorString(err));
  return p;
#else
  DAPO_FAIL("device memory requested, but this build has no CUDA");
#endif
}

void memory_free(Device device, void* p) {
  if (p == nullptr) return;
  if (device == Device::cpu) {
    std::free(p);
    return;
  }
#ifdef DAPO_WITH_CUDA
  const cudaError_t err = cudaFree(p);
  DAPO_CHECK(err == cudaSuccess, "cudaFree: ", cudaGetErrorString(err));
#endif
}

void* pinned_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
#ifdef DAPO_WITH_CUDA
  if (cuda_available()) {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    DAPO_CHECK(err == cudaSuccess, "cudaHostAlloc of ", bytes, " bytes: ", cudaGetErrorString(err));
    return p;
  }
#endif
  return memory_alloc(Device::cpu, bytes);
}

void pinned_free(void* p) {
  if (p == nullptr) return;
#ifdef DAPO_WITH_CUDA
  if (cuda_available()) {
    const cudaError_t err = cudaFreeHost(p);
    DAPO_CHECK(err == cudaSuccess, "cudaFreeHost: ", cudaGetErrorString(err));
    return;
  }
#endif
  memory_free(Device::cpu, p);
}

bool cuda_available() {
#ifdef DAPO_WITH_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

size_t device_memory_free() {
#ifdef DAPO_WITH_CUDA
  size_t free = 0, total = 0;
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  DAPO_CHECK(err == cudaSuccess, "cudaMemGetInfo: ", cudaGetErrorString(err));
  return free;
#else
  return 0;
#endif
}

size_t device_memory_total() {
#ifdef DAPO_WITH_CUDA
  size_t free = 0, total = 0;
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  DAPO_CHECK(err == cudaSuccess, "cudaMemGetInfo: ", cudaGetErrorString(err));
  return total;
#else
  return 0;
#endif
}

Arena::Arena(size_t capacity_bytes, Device device, std::string name)
    : capacity_(capacity_bytes), device_(device), name_(std::move(name)) {
  base_ = static_cast<char*>(memory_alloc(device, capacity_bytes));
}

Arena::Arena(size_t capacity_bytes, Pinned, std::string name)
    : capacity_(capacity_bytes), device_(Device::cpu), pinned_(true), name_(std::move(name)) {
  base_ = static_cast<char*>(pinned_alloc(capacity_bytes));
}

Arena::~Arena() {
  if (pinned_)
    pinned_free(base_);
  else
    memory_free(device_, base_);
}

void* Arena::alloc_bytes(size_t bytes) {
  const size_t start = (used_ + kAlign - 1) / kAlign * kAlign;
  DAPO_CHECK(start + bytes <= capacity_, "arena '", name_, "' (", device_name(device_),
             ") out of memory: asked for ", bytes, " bytes with ", used_, " of ", capacity_,
             " in use");
  used_ = start + bytes;
  if (used_ > peak_) peak_ = used_;
  return base_ + start;
}

Tensor Arena::alloc(DType dtype, std::initializer_list<int64_t> dims) {
  Tensor t(nullptr, dtype, dims, device_);
  t.data = alloc_bytes(t.nbytes());
  return t;
}

void Arena::reset(size_t mark) {
  DAPO_CHECK(mark <= used_, "arena '", name_, "' reset to ", mark, " beyond its use ", used_);
  used_ = mark;
}

}  // namespace dapo
