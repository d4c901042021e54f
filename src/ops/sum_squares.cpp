// The sum of squares: the contract of sum_squares.h, checked once, then the backend.
#include "dapo/ops/sum_squares.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {

void sum_squares(const Ctx& ctx, Tensor out, Tensor x) {
  DAPO_CHECK_SHAPE(out, {1});
  detail::check_dtype("sum_squares", out, DType::f32, "out");
  detail::check_dtype("sum_squares", x, DType::f32, "x");
  DAPO_DISPATCH(ctx, sum_squares, out, x);
}

}  // namespace dapo::ops
