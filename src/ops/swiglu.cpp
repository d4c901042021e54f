// SwiGLU: the contract of swiglu.h, checked once, then the backend.
#include "dapo/ops/swiglu.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

// Every tensor has the first one's shape and dtype, f32 or bf16.
void check_swiglu(const char* op, std::initializer_list<const Tensor*> ts, const char* names) {
  const Tensor& first = **ts.begin();
  detail::check_float(op, first, names);
  for (const Tensor* t : ts)
    DAPO_CHECK(t->same_shape(first) && t->dtype == first.dtype, op, ": (", names, ") differ: ", t->shape_string(),
               " ", dtype_name(t->dtype), " against ", first.shape_string(), " ", dtype_name(first.dtype));
}

}  // namespace

void swiglu_forward(const Ctx& ctx, Tensor out, Tensor gate, Tensor up) {
  check_swiglu("swiglu_forward", {&out, &gate, &up}, "out, gate, up");
  DAPO_DISPATCH(ctx, swiglu_forward, out, gate, up);
}

void swiglu_backward(const Ctx& ctx, Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) {
  check_swiglu("swiglu_backward", {&dgate, &dup, &dout, &gate, &up}, "dgate, dup, dout, gate, up");
  DAPO_DISPATCH(ctx, swiglu_backward, dgate, dup, dout, gate, up);
}

}  // namespace dapo::ops
