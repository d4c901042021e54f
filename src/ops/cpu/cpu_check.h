// Argument checks shared by the CPU reference ops (internal to src/ops/cpu).
// Where a tensor lives is checked once for every op, by dispatch.h; whether
// two tensors overlap, by core/tensor.h's overlaps().
#pragma once

#include "dapo/core/tensor.h"

namespace dapo::ops::cpu::detail {

// t holds `dtype` and has data (a tensor with no elements may have none).
inline void check_tensor(const Tensor& t, DType dtype, const char* name) {
  DAPO_CHECK(t.dtype == dtype, name, " is ", dtype_name(t.dtype), ", expected ", dtype_name(dtype));
  DAPO_CHECK(t.data != nullptr || t.numel() == 0, name, " ", t.shape_string(), " has no data");
}

inline void check_f32(const Tensor& t, const char* name) { check_tensor(t, DType::f32, name); }

}  // namespace dapo::ops::cpu::detail
