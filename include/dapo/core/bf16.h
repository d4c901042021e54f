// bfloat16 storage type and its conversions (round to nearest even, NaN kept
// quiet), the same bits the CUDA backend's __nv_bfloat16 holds.
#pragma once

#include <cstdint>
#include <cstring>

namespace dapo {

struct bf16 {
  uint16_t bits = 0;
};

inline bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

inline float to_f32(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace dapo
