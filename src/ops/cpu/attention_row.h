// The per-row arithmetic of the CPU attentions (internal to src/ops/cpu):
// attention over packed sequences (attention.cpp) and paged attention over
// the KV cache (kv_cache.cpp) run these same lines, so that a cached
// forward and a full forward of the same keys give the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dapo::ops::cpu::detail {

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// y += a * x
inline void axpy(float* y, float a, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

// The softmax of a row: its largest score and the sum of exp(score - max).
struct RowSoftmax {
  float max;
  float sum;
};

// One query row over its n keys: out (D) = sum_j p_j v_j with
// p = softmax(scale * q . k_j), exact in two passes over the scores, which
// go to the caller's scratch row s (n floats). key(j) and value(j) point at
// the D floats of key and value j, wherever the caller keeps them (packed
// rows, cache blocks). The log-sum-exp is max + log(sum).
template <class KeyAt, class ValueAt>
inline RowSoftmax attend_row(float* out, const float* q, int64_t n, int64_t D, float scale, float* s, KeyAt key,
                             ValueAt value) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = scale * dot(q, key(j), D);
    m = std::max(m, s[j]);
  }
  float l = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    l += s[j];
  }
  std::fill(out, out + D, 0.0f);
  for (int64_t j = 0; j < n; ++j) axpy(out, s[j], value(j), D);
  const float inv_l = 1.0f / l;
  for (int64_t d = 0; d < D; ++d) out[d] *= inv_l;
  return {m, l};
}

}  // namespace dapo::ops::cpu::detail
