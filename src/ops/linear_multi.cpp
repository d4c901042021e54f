// Several linear layers over one input: the contract of matmul.h,
// checked once, then the backend. The segments' tensors sit in a span that
// DAPO_DISPATCH's device check does not see: checked here.
#include "dapo/ops/matmul.h"

#include <string>

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {

void detail::check_linear_forward_multi(const char* op, const Tensor& in, std::span<const LinearSegment> segments) {
  DAPO_CHECK(!segments.empty() && segments.size() <= size_t(kMaxLinearSegments), op, ": ", segments.size(),
             " segments, expected 1 to ", kMaxLinearSegments);
  check_float(op, in, "in");
  DAPO_CHECK(in.ndim == 2, op, ": in ", in.shape_string(), " must be 2-D");
  const int64_t M = in.shape[0], K = in.shape[1];
  for (size_t i = 0; i < segments.size(); ++i) {
    const LinearSegment& s = segments[i];
    const std::string seg = "segment " + std::to_string(i) + "'s ";
    check_dtype(op, s.weight, in.dtype, (seg + "weight").c_str());
    check_float(op, s.out, (seg + "out").c_str());
    DAPO_CHECK(in.dtype == DType::bf16 || s.out.dtype == DType::f32, op, ": f32 operands into ", seg, "out of ",
               dtype_name(s.out.dtype), "; the products are bf16 x bf16 -> bf16 or f32, and f32 x f32 -> f32");
    DAPO_CHECK(s.weight.ndim == 2, op, ": ", seg, "weight ", s.weight.shape_string(), " must be 2-D");
    const int64_t N = s.weight.shape[0];
    DAPO_CHECK_SHAPE(s.weight, {N, K});
    DAPO_CHECK_SHAPE(s.out, {M, N});
    if (s.bias.defined()) {
      check_float(op, s.bias, (seg + "bias").c_str());
      DAPO_CHECK_SHAPE(s.bias, {N});
    }
    DAPO_CHECK(!overlaps(s.out, in), op, ": ", seg, "out overlaps in");
    for (size_t j = 0; j < segments.size(); ++j) {
      const LinearSegment& t = segments[j];
      DAPO_CHECK(!overlaps(s.out, t.weight) && !overlaps(s.out, t.bias), op, ": ", seg, "out overlaps segment ", j,
                 "'s weight or bias");
      DAPO_CHECK(j == i || !overlaps(s.out, t.out), op, ": the outputs of segments ", i, " and ", j, " overlap");
    }
  }
}

void linear_forward_multi(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  detail::check_linear_forward_multi("linear_forward_multi", in, segments);
  for (const LinearSegment& s : segments)
    detail::check_devices(ctx, "linear_forward_multi", "segment.out, segment.weight, segment.bias", s.out,
                          s.weight, s.bias);
  DAPO_DISPATCH(ctx, linear_forward_multi, in, segments);
}

}  // namespace dapo::ops
