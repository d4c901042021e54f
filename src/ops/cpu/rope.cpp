// CPU reference of rotary position embedding (fp32, OpenMP over tokens).
// Angles follow HF's fp32 recipe (see rope.h), recomputed per token: the
// D/2 cos/sin pairs of a token are shared by its H heads.
#include "dapo/ops/rope.h"

#include <cmath>

namespace dapo::ops::cpu {
namespace {

void check_rope_args(const char* op, const Tensor& out, const Tensor& in, const Tensor& positions,
                     float theta) {
  DAPO_CHECK_DTYPE(out, DType::f32);
  DAPO_CHECK_DTYPE(in, DType::f32);
  DAPO_CHECK_DTYPE(positions, DType::i32);
  DAPO_CHECK(in.ndim == 3, op, ": input must be (T, H, D), got ", in.shape_string());
  const int64_t T = in.shape[0], H = in.shape[1], D = in.shape[2];
  DAPO_CHECK(D % 2 == 0, op, ": head dimension ", D, " must be even");
  DAPO_CHECK_SHAPE(out, {T, H, D});
  DAPO_CHECK_SHAPE(positions, {T});
  DAPO_CHECK(theta > 0.0f, op, ": theta ", theta, " must be positive");
  // In-place is fine (each pair is read before it is written); partial
  // overlap would read already-rotated values.
  DAPO_CHECK(out.data == in.data || !overlaps(out, in), op, ": out and in overlap without being the same buffer");
}

// sign = +1: forward rotation by +angle; sign = -1: the inverse (backward).
void rotate(Tensor out, Tensor in, Tensor positions, float theta, float sign) {
  const int64_t T = in.shape[0], H = in.shape[1], D = in.shape[2], half = D / 2;
  float* y = out.ptr<float>();              // (T, H, D)
  const float* x = in.ptr<float>();         // (T, H, D)
  const int32_t* pos = positions.ptr<int32_t>();  // (T)
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float p = float(pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      // HF: inv_freq = 1.0 / (theta ** (float(2i) / D)), all in fp32.
      const float exponent = float(2 * i) / float(D);
      const float inv_freq = 1.0f / std::pow(theta, exponent);
      const float angle = p * inv_freq;
      const float c = std::cos(angle);
      const float s = sign * std::sin(angle);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = (t * H + h) * D;
        const float x1 = x[base + i], x2 = x[base + i + half];
        // Two rounded products then a sum, as x*cos + rotate_half(x)*sin.
        const float c1 = x1 * c, s1 = -x2 * s;
        const float c2 = x2 * c, s2 = x1 * s;
        y[base + i] = c1 + s1;
        y[base + i + half] = c2 + s2;
      }
    }
  }
}

}  // namespace

void rope_forward(const Ctx&, Tensor out, Tensor in, Tensor positions, float theta) {
  check_rope_args("rope_forward", out, in, positions, theta);
  rotate(out, in, positions, theta, 1.0f);
}

void rope_backward(const Ctx&, Tensor din, Tensor dout, Tensor positions, float theta) {
  check_rope_args("rope_backward", din, dout, positions, theta);
  rotate(din, dout, positions, theta, -1.0f);
}

}  // namespace dapo::ops::cpu
