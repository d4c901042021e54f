// The fused gate/up products and SwiGLU: the contract of matmul.h,
// checked once, then the backend.
#include "dapo/ops/matmul.h"

#include <utility>

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

constexpr const char* kOp = "linear_swiglu_forward";

// The whole contract: the product's (check_linear_swiglu), the scratch of
// the unfused path, and the folded norm of in's rows.
void check_linear_swiglu_forward(const Tensor& h, const Tensor& gate, const Tensor& up, const Tensor& in,
                                 const Tensor& w_gate, const Tensor& w_up, const RowNorm& rn) {
  detail::check_linear_swiglu(h, in, w_gate, w_up);
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  detail::check_dtype(kOp, gate, in.dtype, "gate");
  detail::check_dtype(kOp, up, in.dtype, "up");
  DAPO_CHECK_SHAPE(gate, {M, I});
  DAPO_CHECK_SHAPE(up, {M, I});
  for (const auto& [t, name] : {std::pair{&gate, "gate"}, {&up, "up"}})
    DAPO_CHECK(!overlaps(*t, h) && !overlaps(*t, in) && !overlaps(*t, w_gate) && !overlaps(*t, w_up), kOp, ": ",
               name, " overlaps h, in or a weight");
  DAPO_CHECK(!overlaps(gate, up), kOp, ": gate overlaps up");
  if (rn.active()) {
    detail::check_row_norm(rn, M, K, kOp);
    detail::check_dtype(kOp, rn.ssq, DType::f32, "rn.ssq");
    // in is normed in place (or read under the norm while h is written).
    DAPO_CHECK(!overlaps(rn.ssq, in) && !overlaps(rn.ssq, h), kOp, ": rn.ssq overlaps in or h");
  }
}

}  // namespace

void detail::check_linear_swiglu(const Tensor& h, const Tensor& in, const Tensor& w_gate, const Tensor& w_up) {
  for (const auto& [t, name] : {std::pair{&h, "h"}, {&in, "in"}, {&w_gate, "w_gate"}, {&w_up, "w_up"}})
    DAPO_CHECK(t->ndim == 2, kOp, ": ", name, " ", t->shape_string(), " must be 2-D");
  check_float(kOp, in, "in");
  check_dtype(kOp, w_gate, in.dtype, "w_gate");
  check_dtype(kOp, w_up, in.dtype, "w_up");
  check_dtype(kOp, h, in.dtype, "h");
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  DAPO_CHECK_SHAPE(w_gate, {I, K});
  DAPO_CHECK_SHAPE(w_up, {I, K});
  DAPO_CHECK_SHAPE(h, {M, I});
  DAPO_CHECK(!overlaps(h, in) && !overlaps(h, w_gate) && !overlaps(h, w_up), kOp, ": h overlaps in or a weight");
}

void linear_swiglu_forward(const Ctx& ctx, Tensor h, Tensor gate, Tensor up, Tensor in, Tensor w_gate,
                           Tensor w_up, const RowNorm& rn) {
  check_linear_swiglu_forward(h, gate, up, in, w_gate, w_up, rn);
  detail::check_devices(ctx, "linear_swiglu_forward", "rn.ssq", rn.ssq);
  DAPO_DISPATCH(ctx, linear_swiglu_forward, h, gate, up, in, w_gate, w_up, rn);
}

}  // namespace dapo::ops
