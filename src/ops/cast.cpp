// The dtype cast: the contract of cast.h, checked once, then the backend.
#include "dapo/ops/cast.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

void check_cast(const Tensor& out, const Tensor& in) {
  DAPO_CHECK(out.same_shape(in), "cast: out ", out.shape_string(), " and in ", in.shape_string(),
             " differ in shape");
  if (in.numel() == 0) return;
  DAPO_CHECK(out.data != nullptr && in.data != nullptr, "cast: a tensor has no data");
  if (out.dtype == in.dtype) {
    DAPO_CHECK(out.data == in.data || !overlaps(out, in), "cast: out partially overlaps in");
    return;
  }
  DAPO_CHECK((in.dtype == DType::f32 && out.dtype == DType::bf16) ||
                 (in.dtype == DType::bf16 && out.dtype == DType::f32),
             "cast from ", dtype_name(in.dtype), " to ", dtype_name(out.dtype),
             " is not supported (f32 <-> bf16 and same-dtype copies are)");
  DAPO_CHECK(!overlaps(out, in), "cast ", dtype_name(in.dtype), " -> ", dtype_name(out.dtype),
             " cannot run in place");
}

}  // namespace

void cast(const Ctx& ctx, Tensor out, Tensor in) {
  check_cast(out, in);
  DAPO_DISPATCH(ctx, cast, out, in);
}

}  // namespace dapo::ops
