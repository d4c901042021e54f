// CPU reference of the dtype cast (OpenMP over elements; bf16 rounding from
// core/bf16.h, the same bits as CUDA's __float2bfloat16_rn).
#include "dapo/ops/cast.h"
#include "src/ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cstring>

namespace dapo::ops::cpu {
namespace {

// Bytes per task of a same-dtype copy: large enough that memcpy runs at
// full speed, small enough that a multi-GB weight copy spreads over threads.
constexpr size_t kCopyChunk = size_t(1) << 20;

}  // namespace

// The contract (shapes, the supported pairs, aliasing) is checked by ops::cast.
void cast(const Ctx&, Tensor out, Tensor in) {
  const int64_t n = in.numel();
  if (n == 0) return;
  if (out.dtype == in.dtype) {
    if (out.data == in.data) return;
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

  if (in.dtype == DType::f32 && out.dtype == DType::bf16) {
    const float* s = in.ptr<float>();
    bf16* o = out.ptr<bf16>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = to_bf16(s[i]);
  } else {
    const bf16* s = in.ptr<bf16>();
    float* o = out.ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = to_f32(s[i]);
  }
}

}  // namespace dapo::ops::cpu
