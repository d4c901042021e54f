// Host <-> optimizer-buffer copies for host and CUDA memory (device_memory.h).
#include "device_memory.h"

#include <cstring>

#include "dapo/core/error.h"

#ifdef DAPO_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dapo::optim::detail {
namespace {

#ifdef DAPO_WITH_CUDA
void cuda_check(cudaError_t err, const char* what) {
  DAPO_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}
void copy(void* s, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  cudaStream_t stream = static_cast<cudaStream_t>(s);
  cuda_check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync of an optimizer buffer");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after an optimizer copy");
}
#endif

}  // namespace

void fill_zero(Device device, void* stream, float* p, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memset(p, 0, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  cuda_check(cudaMemsetAsync(p, 0, size_t(n) * sizeof(float), static_cast<cudaStream_t>(stream)),
             "cudaMemsetAsync of an optimizer buffer");
#else
  DAPO_FAIL("a device optimizer buffer in a build without CUDA");
#endif
}

void copy_to_host(void* stream, Device device, float* host, const float* buffer, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memcpy(host, buffer, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  copy(stream, host, buffer, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost);
#else
  DAPO_FAIL("a device optimizer buffer in a build without CUDA");
#endif
}

void copy_from_host(void* stream, Device device, float* buffer, const float* host, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memcpy(buffer, host, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  copy(stream, buffer, host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice);
#else
  DAPO_FAIL("a device optimizer buffer in a build without CUDA");
#endif
}

}  // namespace dapo::optim::detail
