// Backend dispatch of the sum of squares.
#include "dapo/ops/sum_squares.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void sum_squares(const Ctx& ctx, Tensor out, Tensor x) { DAPO_DISPATCH(ctx, sum_squares, out, x); }

}  // namespace dapo::ops
