// Carver: carves the buffers of a phase from an arena, or, given none, only
// counts the bytes the same sequence of allocations would take. A phase
// writes one function that carves its buffers from a Carver, runs it once
// without an arena to size the arena, then again to carve it: the size
// always matches the allocations, with no second formula to keep in step
// (the model's activation plans and the generation engine's rows do so).
#pragma once

#include <cstddef>
#include <initializer_list>

#include "dapo/core/arena.h"

namespace dapo {

class Carver {
 public:
  explicit Carver(Arena* arena) : arena_(arena), base_(arena ? arena->mark() : 0), used_(base_), peak_(base_) {}

  // When counting, the tensor (host, by default) and the pointer have no data.
  Tensor alloc(DType dtype, std::initializer_list<int64_t> dims);
  Tensor f32(std::initializer_list<int64_t> dims) { return alloc(DType::f32, dims); }
  template <class T>
  T* alloc_array(size_t count) { return static_cast<T*>(alloc_bytes(count * sizeof(T))); }
  void* alloc_bytes(size_t bytes);

  size_t mark() const { return used_; }
  void reset(size_t mark);
  // The high-water mark since construction, relative to where the arena
  // stood then.
  size_t peak() const { return peak_ - base_; }
  // The capacity of an arena that the same allocations fit: peak() and one
  // alignment, for an arena whose mark is not aligned when carving starts.
  size_t arena_bytes() const { return peak() + Arena::kAlign; }

 private:
  Arena* arena_;
  size_t base_;
  size_t used_;
  size_t peak_;
};

}  // namespace dapo
