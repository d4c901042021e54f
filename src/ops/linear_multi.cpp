// Backend dispatch of linear_forward_multi. The segments' tensors sit in a
// span that DAPO_DISPATCH's device check does not see: checked here.
#include "dapo/ops/linear_multi.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  for (const LinearSegment& s : segments)
    detail::check_devices(ctx, "linear_forward_multi", "segment.out, segment.weight, segment.bias", s.out,
                          s.weight, s.bias);
  DAPO_DISPATCH(ctx, linear_forward_multi, in, segments);
}

}  // namespace dapo::ops
