// Arena: one block of memory (host or device) carved into aligned pieces
// with a bump pointer. Each phase (generation: KV cache; update:
// activations) takes a mark, allocates what it needs, and resets to the mark
// at the end, so hot loops never call malloc/cudaMalloc. Running out is a
// fatal error that says how much was asked for and what is left.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include "dapo/core/tensor.h"

namespace dapo {

// Raw device-aware allocation used by arenas and parameter buffers. Host
// memory is 256-byte aligned; device memory comes from cudaMalloc (only in
// CUDA builds; asking for it elsewhere is a fatal error).
void* memory_alloc(Device device, size_t bytes);
void memory_free(Device device, void* p);
// Page-locked host memory (cudaHostAlloc) for staging buffers that a GPU
// stream copies from or to without the driver's bounce buffer, so that an
// async copy is really async. Builds without CUDA, or hosts without a GPU,
// get ordinary aligned host memory.
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);
bool cuda_available();  // built with CUDA and at least one device visible
// Bytes free on the current GPU, and its total (cudaMemGetInfo); 0 without CUDA.
size_t device_memory_free();
size_t device_memory_total();

class Arena {
 public:
  static constexpr size_t kAlign = 256;  // cache lines; cuBLASLt/TMA-friendly on GPUs

  Arena(size_t capacity_bytes, Device device, std::string name);
  // A host arena in page-locked memory (pinned_alloc): the per-step
  // host<->device staging of the generation engine.
  struct Pinned {};
  Arena(size_t capacity_bytes, Pinned, std::string name);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* alloc_bytes(size_t bytes);
  Tensor alloc(DType dtype, std::initializer_list<int64_t> dims);
  template <class T>
  T* alloc_array(size_t count) { return static_cast<T*>(alloc_bytes(count * sizeof(T))); }

  size_t mark() const { return used_; }
  void reset(size_t mark = 0);

  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return capacity_; }
  Device device() const { return device_; }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  Device device_;
  bool pinned_ = false;
  std::string name_;
};

// Resets an arena to where it stood when the scope began.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& arena) : arena_(arena), mark_(arena.mark()) {}
  ~ArenaScope() { arena_.reset(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& arena_;
  size_t mark_;
};

}  // namespace dapo
