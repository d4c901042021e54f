// CPU reference of the SwiGLU activation (fp32, OpenMP over elements).
#include "dapo/ops/swiglu.h"

#include <cmath>

namespace dapo::ops::cpu {

void swiglu_forward(const Ctx&, Tensor out, Tensor gate, Tensor up) {
  DAPO_CHECK(gate.same_shape(up) && gate.same_shape(out), "swiglu shapes ", out.shape_string(),
             " ", gate.shape_string(), " ", up.shape_string());
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
  DAPO_CHECK(gate.same_shape(up) && gate.same_shape(dout) && gate.same_shape(dgate) &&
                 gate.same_shape(dup),
             "swiglu_backward shapes");
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
