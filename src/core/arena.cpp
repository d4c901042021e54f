// Bump allocator over one host or device block; see arena.h for the why.
#include "dapo/core/arena.h"

#include <cstdlib>

#include "dapo/core/device_runtime.h"

namespace dapo {

void* memory_alloc(Device device, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device == Device::cpu) {
    const size_t rounded = (bytes + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
    void* p = std::aligned_alloc(Arena::kAlign, rounded);
    DAPO_CHECK(p != nullptr, "host allocation of ", bytes, " bytes failed");
    return p;
  }
  return device_runtime::alloc(bytes);
}

void memory_free(Device device, void* p) {
  if (p == nullptr) return;
  if (device == Device::cpu) {
    std::free(p);
    return;
  }
  device_runtime::free(p);
}

void* pinned_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device_runtime::available()) return device_runtime::alloc_pinned(bytes);
  return memory_alloc(Device::cpu, bytes);
}

void pinned_free(void* p) {
  if (p == nullptr) return;
  if (device_runtime::available()) {
    device_runtime::free_pinned(p);
    return;
  }
  memory_free(Device::cpu, p);
}

bool cuda_available() { return device_runtime::available(); }

size_t device_memory_free() { return device_runtime::memory_free(); }

size_t device_memory_total() { return device_runtime::memory_total(); }

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
