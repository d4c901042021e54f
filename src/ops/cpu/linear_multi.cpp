// CPU reference of linear_forward_multi: one linear_forward per segment.
#include "dapo/ops/linear_multi.h"

#include "dapo/ops/matmul.h"

namespace dapo::ops::cpu {

void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  DAPO_CHECK(!segments.empty() && segments.size() <= size_t(kMaxLinearSegments), "linear_forward_multi: ",
             segments.size(), " segments, expected 1 to ", kMaxLinearSegments);
  for (size_t i = 0; i < segments.size(); ++i) {
    const LinearSegment& s = segments[i];
    DAPO_CHECK(!overlaps(s.out, in), "linear_forward_multi: segment ", i, "'s out overlaps in");
    for (size_t j = 0; j < segments.size(); ++j) {
      const LinearSegment& t = segments[j];
      DAPO_CHECK(!overlaps(s.out, t.weight) && !overlaps(s.out, t.bias), "linear_forward_multi: segment ", i,
                 "'s out overlaps segment ", j, "'s weight or bias");
      DAPO_CHECK(j == i || !overlaps(s.out, t.out), "linear_forward_multi: the outputs of segments ", i, " and ", j,
                 " overlap");
    }
  }
  for (const LinearSegment& s : segments) cpu::linear_forward(ctx, s.out, in, s.weight, s.bias);
}

}  // namespace dapo::ops::cpu
