// Backend dispatch of the fill op, and the value conversion both backends share.
#include "dapo/ops/fill.h"

#include <cmath>
#include <cstring>

#include "src/ops/dispatch.h"
#include "src/ops/cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops {

namespace detail {

uint64_t fill_pattern(DType dtype, double value) {
  switch (dtype) {
    case DType::f32: {
      const float f = float(value);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
    case DType::bf16:
      return to_bf16(float(value)).bits;
    case DType::i32:
      DAPO_CHECK(value == std::trunc(value) && value >= -2147483648.0 && value <= 2147483647.0, "fill: ", value,
                 " is not an i32 value");
      return uint32_t(int32_t(value));
    case DType::i64:
      // 2^63 is the first double above the range.
      DAPO_CHECK(value == std::trunc(value) && value >= -9223372036854775808.0 && value < 9223372036854775808.0,
                 "fill: ", value, " is not an i64 value");
      return uint64_t(int64_t(value));
  }
  DAPO_FAIL("fill: unknown dtype");
}

}  // namespace detail

void fill(const Ctx& ctx, Tensor t, double value) {
  detail::fill_pattern(t.dtype, value);  // the value fits the dtype, even for no elements
  DAPO_CHECK(t.data != nullptr || t.numel() == 0, "fill: the tensor has no data");
  DAPO_DISPATCH(ctx, fill, t, value);
}

}  // namespace dapo::ops
