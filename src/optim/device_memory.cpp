// Host <-> optimizer-buffer copies for host and device memory (device_memory.h).
#include "device_memory.h"

#include <cstring>

#include "dapo/core/device_runtime.h"
#include "dapo/core/error.h"

namespace dapo::optim::detail {
namespace {

// A copy the host waits for: its buffer is read or reused right after.
void copy(void* stream, void* dst, const void* src, size_t bytes, device_runtime::CopyKind kind) {
  device_runtime::copy_async(dst, src, bytes, kind, stream, "an optimizer buffer");
  device_runtime::synchronize(stream, "after an optimizer copy");
}

}  // namespace

void fill_zero(Device device, void* stream, float* p, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memset(p, 0, size_t(n) * sizeof(float));
    return;
  }
  device_runtime::memset_async(p, 0, size_t(n) * sizeof(float), stream, "an optimizer buffer");
}

void copy_to_host(void* stream, Device device, float* host, const float* buffer, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memcpy(host, buffer, size_t(n) * sizeof(float));
    return;
  }
  copy(stream, host, buffer, size_t(n) * sizeof(float), device_runtime::CopyKind::device_to_host);
}

void copy_from_host(void* stream, Device device, float* buffer, const float* host, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memcpy(buffer, host, size_t(n) * sizeof(float));
    return;
  }
  copy(stream, buffer, host, size_t(n) * sizeof(float), device_runtime::CopyKind::host_to_device);
}

}  // namespace dapo::optim::detail
