// Helpers for the contract checks of src/ops/<op>.cpp: the checks an op's
// header promises, run once before dispatch whatever the backend. A backend
// checks only its own limits (the CPU's f32, a kernel's largest row).
#pragma once

#include <initializer_list>

#include "dapo/core/tensor.h"

namespace dapo::ops::detail {

// t holds `dtype` and has data (a tensor with no elements may have none).
inline void check_dtype(const char* op, const Tensor& t, DType dtype, const char* name) {
  DAPO_CHECK(t.dtype == dtype, op, ": ", name, " is ", dtype_name(t.dtype), ", expected ", dtype_name(dtype));
  DAPO_CHECK(t.data != nullptr || t.numel() == 0, op, ": ", name, " ", t.shape_string(), " has no data");
}

// A floating-point storage type the ops compute on: f32 or bf16.
inline void check_float(const char* op, const Tensor& t, const char* name) {
  DAPO_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, op, ": ", name, " is ", dtype_name(t.dtype),
             ", expected f32 or bf16");
  DAPO_CHECK(t.data != nullptr || t.numel() == 0, op, ": ", name, " ", t.shape_string(), " has no data");
}

// Whether x and y share bytes. Tensors on different devices share none: the
// device check after the contract's names the misplaced one.
inline bool shares_bytes(const Tensor& x, const Tensor& y) { return x.device == y.device && overlaps(x, y); }
// A tensor of a call and its name in the op's errors.
struct NamedTensor {
  const Tensor& t;
  const char* name;
};
// No output shares bytes with another output or an input: the backends read
// the inputs, and write the other outputs, while they write it.
inline void check_outputs_apart(const char* op, std::initializer_list<NamedTensor> outputs,
                                std::initializer_list<NamedTensor> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (auto p = o + 1; p != outputs.end(); ++p)
      DAPO_CHECK(!shares_bytes(o->t, p->t), op, ": ", o->name, " overlaps ", p->name);
    for (const NamedTensor& i : inputs)
      DAPO_CHECK(!shares_bytes(o->t, i.t), op, ": ", o->name, " overlaps ", i.name);
  }
}

// The backward of a row norm (rmsnorm_backward, residual_rmsnorm_backward):
// dx (N, C) and dout (N, C) in x's float dtype, weight (C) too, dweight (C)
// and rstd (N) f32; the two outputs apart from each other and the inputs.
// `x` and `dx` name the normed rows and their gradient in the op's errors.
inline void check_norm_backward(const char* op, const Tensor& dx, const char* dx_name, const Tensor& dweight,
                                const Tensor& dout, const Tensor& x, const char* x_name, const Tensor& weight,
                                const Tensor& rstd) {
  check_float(op, x, x_name);
  check_dtype(op, dx, x.dtype, dx_name);
  check_dtype(op, dout, x.dtype, "dout");
  check_dtype(op, weight, x.dtype, "weight");
  check_dtype(op, dweight, DType::f32, "dweight");
  check_dtype(op, rstd, DType::f32, "rstd");
  DAPO_CHECK(x.ndim == 2, op, ": ", x_name, " ", x.shape_string(), " must be (N, C)");
  const int64_t N = x.shape[0], C = x.shape[1];
  DAPO_CHECK(C > 0, op, ": rmsnorm over an empty row");
  DAPO_CHECK_SHAPE(dx, {N, C});
  DAPO_CHECK_SHAPE(dout, {N, C});
  DAPO_CHECK_SHAPE(weight, {C});
  DAPO_CHECK_SHAPE(dweight, {C});
  DAPO_CHECK_SHAPE(rstd, {N});
  check_outputs_apart(op, {{dx, dx_name}, {dweight, "dweight"}},
                      {{dout, "dout"}, {x, x_name}, {weight, "weight"}, {rstd, "rstd"}});
}

}  // namespace dapo::ops::detail
