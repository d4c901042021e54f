// Backend dispatch of the fused gate/up products and SwiGLU.
#include "dapo/ops/linear_swiglu.h"

#include <utility>

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void detail::check_linear_swiglu(const Tensor& h, const Tensor& in, const Tensor& w_gate, const Tensor& w_up) {
  for (const auto& [t, name] : {std::pair{&h, "h"}, {&in, "in"}, {&w_gate, "w_gate"}, {&w_up, "w_up"}})
    DAPO_CHECK(t->ndim == 2, "linear_swiglu_forward: ", name, " ", t->shape_string(), " must be 2-D");
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  DAPO_CHECK_SHAPE(w_gate, {I, K});
  DAPO_CHECK_SHAPE(w_up, {I, K});
  DAPO_CHECK_SHAPE(h, {M, I});
  DAPO_CHECK(!overlaps(h, in) && !overlaps(h, w_gate) && !overlaps(h, w_up),
             "linear_swiglu_forward: h overlaps in or a weight");
}

void linear_swiglu_forward(const Ctx& ctx, Tensor h, Tensor gate, Tensor up, Tensor in, Tensor w_gate,
                           Tensor w_up, const RowNorm& rn) {
  detail::check_devices(ctx, "linear_swiglu_forward", "rn.ssq", rn.ssq);
  DAPO_DISPATCH(ctx, linear_swiglu_forward, h, gate, up, in, w_gate, w_up, rn);
}

}  // namespace dapo::ops
