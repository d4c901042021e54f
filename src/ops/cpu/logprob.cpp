// CPU reference of the log-prob + entropy op (fp32 in and out, per-row sums
// accumulated in double; OpenMP over rows). See include/dapo/ops/logprob.h.
#include "dapo/ops/logprob.h"
#include "src/ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dapo::ops::cpu {
namespace {

// Vocabulary chunk of the single-pass forward: 2048 floats (8 KiB) stay in
// L1 between the chunk's max scan and its exp/sum scan, so a row of Qwen's
// 151,936 logits is read from memory once.
constexpr int64_t kChunk = 2048;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// An absent upstream gradient (Tensor{}, see Tensor::defined) means zero.

// The contract is checked by the ops:: functions; the reference reads f32
// logits (and then every gradient is f32 too).
void check_logits(const Tensor& logits) { DAPO_CHECK_DTYPE(logits, DType::f32); }

// Adds the terms of z[0..len) relative to the max m: s0 += exp(z - m),
// s1 += exp(z - m) * (z - m). exp underflowing to 0 (e.g. a -inf logit) adds
// nothing instead of 0 * -inf = NaN.
inline void accumulate(const float* x, int64_t len, float inv_temperature, float m, double& s0,
                       double& s1) {
  double a0 = 0, a1 = 0;
  for (int64_t i = 0; i < len; ++i) {
    const float d = x[i] * inv_temperature - m;
    const float e = std::exp(d);
    a0 += e;
    if (e > 0.0f) a1 += double(e) * d;
  }
  s0 += a0;
  s1 += a1;
}

}  // namespace

void logits_row_max(const Ctx&, Tensor row_max, Tensor logits, float inv_temperature) {
  check_logits(logits);
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* x = logits.ptr<float>();  // (N, V)
  float* out = row_max.ptr<float>();     // (N)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = x + n * V;
    float m = kNegInf;
    // max of z, not of the logits times inv_temperature afterwards, so that
    // the value is bit-identical to the z that pass 2 subtracts it from.
    for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v] * inv_temperature);
    out[n] = m;
  }
}

void logits_partial_sums(const Ctx&, Tensor sums, Tensor logits, Tensor targets, Tensor row_max,
                         int64_t vocab_start, float inv_temperature) {
  check_logits(logits);
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* x = logits.ptr<float>();       // (N, V)
  const int32_t* tgt = targets.ptr<int32_t>();  // (N)
  const float* mx = row_max.ptr<float>();     // (N)
  float* out = sums.ptr<float>();             // (N, 3)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = x + n * V;
    const float m = mx[n];
    double s0 = 0, s1 = 0;
    accumulate(row, V, inv_temperature, m, s0, s1);
    const int64_t t = tgt[n];
    DAPO_CHECK(t >= 0, "target ", t, " of row ", n);
    const int64_t local = t - vocab_start;
    out[n * 3 + 0] = float(s0);
    out[n * 3 + 1] = float(s1);
    out[n * 3 + 2] = (local >= 0 && local < V) ? row[local] * inv_temperature - m : 0.0f;
  }
}

void logprob_entropy_finish(const Ctx&, Tensor logprob, Tensor entropy, Tensor lse, Tensor sums,
                            Tensor row_max) {
  const int64_t N = row_max.size(0);
  const float* s = sums.ptr<float>();     // (N, 3)
  const float* mx = row_max.ptr<float>(); // (N)
  float* lp = logprob.ptr<float>();       // (N)
  float* ent = entropy.ptr<float>();      // (N)
  float* l = lse.ptr<float>();            // (N)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const double s0 = s[n * 3 + 0], s1 = s[n * 3 + 1], s2 = s[n * 3 + 2];
    const double log_s0 = std::log(s0);
    l[n] = float(double(mx[n]) + log_s0);
    lp[n] = float(s2 - log_s0);
    ent[n] = float(log_s0 - s1 / s0);
  }
}

void logprob_entropy_forward(const Ctx&, Tensor logprob, Tensor entropy, Tensor lse, Tensor logits,
                             Tensor targets, int64_t vocab_start, float inv_temperature) {
  check_logits(logits);
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* x = logits.ptr<float>();       // (N, V)
  const int32_t* tgt = targets.ptr<int32_t>();  // (N)
  float* lp = logprob.ptr<float>();           // (N)
  float* ent = entropy.ptr<float>();          // (N)
  float* l = lse.ptr<float>();                // (N)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = x + n * V;
    const int64_t local = int64_t(tgt[n]) - vocab_start;
    DAPO_CHECK(local >= 0 && local < V, "target ", tgt[n], " of row ", n, " outside the vocabulary [",
               vocab_start, ", ", vocab_start + V, ")");
    // Online softmax: m is the max so far and s0, s1 are relative to it; a
    // larger max in a later chunk rescales them (sum e^(z-m') (z-m') =
    // a * (s1 + (m - m') s0) with a = e^(m - m')).
    float m = kNegInf;
    double s0 = 0, s1 = 0;
    for (int64_t c0 = 0; c0 < V; c0 += kChunk) {
      const int64_t len = std::min(kChunk, V - c0);
      const float* chunk = row + c0;
      float cm = kNegInf;
      for (int64_t i = 0; i < len; ++i) cm = std::max(cm, chunk[i] * inv_temperature);
      if (cm > m) {
        if (s0 > 0) {
          const double shift = double(m) - double(cm);
          const double a = std::exp(shift);
          s1 = a * (s1 + shift * s0);
          s0 *= a;
        }
        m = cm;
      }
      accumulate(chunk, len, inv_temperature, m, s0, s1);
    }
    const double log_s0 = std::log(s0);
    l[n] = float(double(m) + log_s0);
    lp[n] = float(double(row[local] * inv_temperature - m) - log_s0);
    ent[n] = float(log_s0 - s1 / s0);
  }
}

void logprob_entropy_backward(const Ctx&, Tensor dlogits, Tensor dlogprob, Tensor dentropy,
                              Tensor logits, Tensor targets, Tensor lse, Tensor entropy,
                              int64_t vocab_start, float inv_temperature) {
  check_logits(logits);
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* x = logits.ptr<float>();                                   // (N, V)
  const int32_t* tgt = targets.ptr<int32_t>();                              // (N)
  const float* l = lse.ptr<float>();                                      // (N)
  const float* ent = entropy.ptr<float>();                                // (N)
  const float* glp = dlogprob.defined() ? dlogprob.ptr<float>() : nullptr;  // (N)
  const float* gent = dentropy.defined() ? dentropy.ptr<float>() : nullptr; // (N)
  float* dx = dlogits.ptr<float>();                                       // (N, V)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = x + n * V;
    float* drow = dx + n * V;
    const float g_lp = glp ? glp[n] : 0.0f;
    const float g_ent = gent ? gent[n] : 0.0f;
    const float lse_n = l[n], H = ent[n];
    for (int64_t v = 0; v < V; ++v) {
      const float logp = row[v] * inv_temperature - lse_n;
      const float p = std::exp(logp);
      // p * (log p + H) -> 0 as p -> 0; never 0 * -inf.
      const float ent_term = p > 0.0f ? p * (logp + H) : 0.0f;
      drow[v] = inv_temperature * (-g_lp * p - g_ent * ent_term);
    }
    const int64_t t = tgt[n];
    DAPO_CHECK(t >= 0, "target ", t, " of row ", n);
    const int64_t local = t - vocab_start;
    if (local >= 0 && local < V) drow[local] += inv_temperature * g_lp;
  }
}

}  // namespace dapo::ops::cpu
