// Argument checks shared by the CPU reference ops (internal to src/ops/cpu).
#pragma once

#include "dapo/core/tensor.h"

namespace dapo::ops::cpu::detail {

// t must hold `dtype` in host memory (a tensor with no elements may have no data).
inline void check_cpu(const Tensor& t, DType dtype, const char* name) {
  DAPO_CHECK(t.dtype == dtype, name, " is ", dtype_name(t.dtype), ", expected ", dtype_name(dtype));
  DAPO_CHECK(t.device == Device::cpu, name, " is on ", device_name(t.device),
             ", the CPU backend needs host memory");
  DAPO_CHECK(t.data != nullptr || t.numel() == 0, name, " ", t.shape_string(), " has no data");
}

// Whether the bytes of x and y intersect (empty tensors never do).
inline bool overlap(const Tensor& x, const Tensor& y) {
  if (x.nbytes() == 0 || y.nbytes() == 0) return false;
  const char* xb = static_cast<const char*>(x.data);
  const char* yb = static_cast<const char*>(y.data);
  return xb < yb + y.nbytes() && yb < xb + x.nbytes();
}

}  // namespace dapo::ops::cpu::detail
