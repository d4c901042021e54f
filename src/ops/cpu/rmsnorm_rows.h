// The arithmetic of RMSNorm's backward on the CPU, shared by rmsnorm_backward
// (din overwritten) and residual_rmsnorm_backward (din added into the
// residual gradient): one pass over rows for the input gradient, one over
// column chunks for the weight gradient, so that its sum over rows has one
// fixed order whatever the thread count. Values f32, row reductions in double.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dapo::ops::cpu::detail {

// dx (N, C): = (or += when accumulate) r*w*g - x * r^3 * mean_c(w*g*x);
// dw (C) += sum over rows of g * x * r. g = dout, x = the norm's input,
// w = weight (C), r = rstd (N).
inline void rmsnorm_backward_rows(float* dx, bool accumulate, float* dw, const float* g, const float* x,
                                  const float* w, const float* r, int64_t N, int64_t C) {
  // The second term is the gradient through rstd, which couples all
  // columns of a row.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gr = g + n * C;
    const float* xr = x + n * C;
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) dot += double(w[c]) * double(gr[c]) * double(xr[c]);
    const double rs = r[n];
    const float coef = float(rs * rs * rs * dot / double(C));
    const float rsf = r[n];
    float* dr = dx + n * C;
    if (accumulate)
      for (int64_t c = 0; c < C; ++c) dr[c] += rsf * (w[c] * gr[c]) - coef * xr[c];
    else
      for (int64_t c = 0; c < C; ++c) dr[c] = rsf * (w[c] * gr[c]) - coef * xr[c];
  }

  constexpr int64_t kColumnChunk = 64;
  const int64_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kColumnChunk;
    const int64_t len = std::min(kColumnChunk, C - c0);
    double acc[kColumnChunk] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* gr = g + n * C + c0;
      const float* xr = x + n * C + c0;
      const double rs = r[n];
      for (int64_t j = 0; j < len; ++j) acc[j] += double(gr[j]) * double(xr[j]) * rs;
    }
    for (int64_t j = 0; j < len; ++j) dw[c0 + j] += float(acc[j]);
  }
}

}  // namespace dapo::ops::cpu::detail
