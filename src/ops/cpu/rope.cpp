// CPU reference of the RoPE family (fp32, OpenMP over tokens): rotary
// position embedding, and the fused decode-step RoPE + KV cache write (with
// Qwen3's per-head norm first, when given).
// Angles follow HF's fp32 recipe (see rope.h), recomputed per token: the
// D/2 cos/sin pairs of a token are shared by its H heads.
#include "dapo/ops/rope.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

#include <cmath>
#include <vector>

namespace dapo::ops::cpu {
namespace {

using ops::detail::check_dtype;

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

// x (T, H, D) = rmsnorm_forward(x as (T * H, D), weight, eps), in place:
// cpu::rmsnorm_forward itself, on a copy of x (the op does not norm in
// place), so that the bits are the norm's.
void norm_heads(const Ctx& ctx, Tensor x, Tensor weight, float eps) {
  check_dtype("rope_kv_write's head norm on the CPU", x, DType::f32, "q and k");
  const int64_t rows = x.shape[0] * x.shape[1], D = x.shape[2];
  const float* xp = x.ptr<float>();
  std::vector<float> in(xp, xp + x.numel());
  std::vector<float> rstd(static_cast<size_t>(rows));
  cpu::rmsnorm_forward(ctx, x.reshape({rows, D}), tensor_f32(rstd.data(), {rows}), tensor_f32(in.data(), {rows, D}),
                       weight, eps);
}

}  // namespace

// ops::rope_forward and rope_backward checked the contract; the reference
// rotates f32 (out has in's dtype).
void rope_forward(const Ctx&, Tensor out, Tensor in, Tensor positions, float theta) {
  check_dtype("rope_forward on the CPU", in, DType::f32, "in");
  rotate(out, in, positions, theta, 1.0f);
}

void rope_backward(const Ctx&, Tensor din, Tensor dout, Tensor positions, float theta) {
  check_dtype("rope_backward on the CPU", dout, DType::f32, "dout");
  rotate(din, dout, positions, theta, -1.0f);
}

// By definition the three CPU ops in sequence (rope.h), after the head norm
// if any; ops::rope_kv_write checked the contract, the aliasing it forbids
// included, and the ops below check their f32 and the slots.
void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta, const HeadNorm& hn) {
  if (hn.active()) {
    norm_heads(ctx, q, hn.q_weight, hn.eps);
    norm_heads(ctx, k, hn.k_weight, hn.eps);
  }
  cpu::rope_forward(ctx, q, q, positions, theta);
  cpu::rope_forward(ctx, k, k, positions, theta);
  cpu::kv_cache_write(ctx, k_cache, v_cache, k, v, slot_mapping);
}

}  // namespace dapo::ops::cpu
