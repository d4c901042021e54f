// CPU reference of the dtype cast (OpenMP over elements; bf16 rounding from
// core/bf16.h, the same bits as CUDA's __float2bfloat16_rn).
#include "dapo/ops/cast.h"

#include <algorithm>
#include <cstring>

namespace dapo::ops::cpu {
namespace {

// Bytes per task of a same-dtype copy: large enough that memcpy runs at
// full speed, small enough that a multi-GB weight copy spreads over threads.
constexpr size_t kCopyChunk = size_t(1) << 20;

}  // namespace

void cast(const Ctx&, Tensor out, Tensor in) {
  DAPO_CHECK(out.same_shape(in), "cast: out ", out.shape_string(), " and in ", in.shape_string(),
             " differ in shape");
  const int64_t n = in.numel();
  if (n == 0) return;
  DAPO_CHECK(out.data != nullptr && in.data != nullptr, "cast: a tensor has no data");

  if (out.dtype == in.dtype) {
    if (out.data == in.data) return;
    DAPO_CHECK(!overlaps(out, in), "cast: out partially overlaps in");
    char* o = static_cast<char*>(out.data);
    const char* s = static_cast<const char*>(in.data);
    const size_t bytes = in.nbytes();
    const int64_t chunks = int64_t((bytes + kCopyChunk - 1) / kCopyChunk);
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const size_t b0 = size_t(ch) * kCopyChunk;
      std::memcpy(o + b0, s + b0, std::min(kCopyChunk, bytes - b0));
    }
    return;
  }

  DAPO_CHECK(!overlaps(out, in), "cast ", dtype_name(in.dtype), " -> ", dtype_name(out.dtype),
             " cannot run in place");
  if (in.dtype == DType::f32 && out.dtype == DType::bf16) {
    const float* s = in.ptr<float>();
    bf16* o = out.ptr<bf16>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = to_bf16(s[i]);
  } else if (in.dtype == DType::bf16 && out.dtype == DType::f32) {
    const bf16* s = in.ptr<bf16>();
    float* o = out.ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = to_f32(s[i]);
  } else {
    DAPO_FAIL("cast from ", dtype_name(in.dtype), " to ", dtype_name(out.dtype),
              " is not supported (f32 <-> bf16 and same-dtype copies are)");
  }
}

}  // namespace dapo::ops::cpu
