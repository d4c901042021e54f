// Carving from an arena, or counting what carving would take (carver.h).
#include "dapo/core/carver.h"

namespace dapo {

void* Carver::alloc_bytes(size_t bytes) {
  void* p = nullptr;
  if (arena_) {
    p = arena_->alloc_bytes(bytes);
    used_ = arena_->mark();
  } else {
    // The arena's rule: each allocation starts at the next aligned offset.
    used_ = (used_ + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign + bytes;
  }
  if (used_ > peak_) peak_ = used_;
  return p;
}

Tensor Carver::alloc(DType dtype, std::initializer_list<int64_t> dims) {
  Tensor t(nullptr, dtype, dims, arena_ ? arena_->device() : Device::cpu);
  t.data = alloc_bytes(t.nbytes());
  return t;
}

void Carver::reset(size_t mark) {
  DAPO_CHECK(mark >= base_ && mark <= used_, "carver reset to ", mark, " outside [", base_, ", ", used_, "]");
  if (arena_) arena_->reset(mark);
  used_ = mark;
}

}  // namespace dapo
