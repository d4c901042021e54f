// Backend dispatch of the dtype cast.
#include "dapo/ops/cast.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void cast(const Ctx& ctx, Tensor out, Tensor in) { DAPO_DISPATCH(ctx, cast, out, in); }

}  // namespace dapo::ops
