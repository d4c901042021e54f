// CPU reference of the SwiGLU activation (fp32, OpenMP over elements).
#include "dapo/ops/swiglu.h"
#include "src/ops/cpu/cpu_ops.h"
#include "cpu_check.h"

#include <cmath>

namespace dapo::ops::cpu {

// Shapes and dtypes agree (ops::swiglu_forward checks them); the reference computes in f32.
void swiglu_forward(const Ctx&, Tensor out, Tensor gate, Tensor up) {
  detail::check_f32(out, "swiglu_forward: out");
  float* o = out.ptr<float>();
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  const int64_t n = out.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-g[i]));
    o[i] = g[i] * s * u[i];
  }
}

void swiglu_backward(const Ctx&, Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) {
  detail::check_f32(dout, "swiglu_backward: dout");
  float* dg = dgate.ptr<float>();
  float* du = dup.ptr<float>();
  const float* d = dout.ptr<float>();
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  const int64_t n = dout.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-g[i]));
    const float silu = g[i] * s;
    // d silu/dg = s * (1 + g * (1 - s))
    dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    du[i] = d[i] * silu;
  }
}

}  // namespace dapo::ops::cpu
