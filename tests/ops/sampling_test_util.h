// The distribution sample_tokens must draw from, and a chi-square test of
// draws against it: shared by the CPU (tests/ops) and GPU (tests/gpu)
// sampling tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "dapo/ops/sampling.h"

namespace dapo::test {

// softmax(row / T) in double, cut to the top-k of (p desc, id asc), then to
// the shortest prefix reaching top_p of the renormalised rest, renormalised.
inline std::vector<double> expected_distribution(const float* row, int64_t V, const ops::SamplingParams& p) {
  std::vector<double> prob(static_cast<size_t>(V));
  double mx = -std::numeric_limits<double>::infinity(), s = 0;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]) / p.temperature);
  for (int64_t v = 0; v < V; ++v) s += prob[size_t(v)] = std::exp(double(row[v]) / p.temperature - mx);
  for (auto& x : prob) x /= s;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return prob[size_t(a)] > prob[size_t(b)] || (prob[size_t(a)] == prob[size_t(b)] && a < b);
  });
  int64_t keep = p.top_k > 0 ? std::min<int64_t>(V, p.top_k) : V;
  double mass = 0;
  for (int64_t i = 0; i < keep; ++i) mass += prob[size_t(order[size_t(i)])];
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int64_t i = 0; i < keep; ++i) {
      cum += prob[size_t(order[size_t(i)])] / mass;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::vector<double> q(static_cast<size_t>(V), 0.0);
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += prob[size_t(order[size_t(i)])];
  for (int64_t i = 0; i < keep; ++i) q[size_t(order[size_t(i)])] = prob[size_t(order[size_t(i)])] / kept;
  return q;
}

// The chi-square quantile with df degrees of freedom at upper tail 1e-6
// (Wilson-Hilferty; z = 4.7534 is the normal's upper 1e-6 quantile).
inline double chi_square_quantile_1e6(int df) {
  const double z = 4.753424, a = 2.0 / (9.0 * df);
  const double c = 1.0 - a + z * std::sqrt(a);
  return df * c * c * c;
}

struct ChiSquare {
  double stat = 0;
  int df = -1;          // kept tokens - 1
  int64_t outside = 0;  // draws of tokens with q == 0
};

inline ChiSquare chi_square(const std::vector<int32_t>& tokens, const std::vector<double>& q) {
  std::vector<int64_t> count(q.size(), 0);
  ChiSquare r;
  for (const int32_t t : tokens) {
    if (t < 0 || size_t(t) >= q.size() || q[size_t(t)] == 0.0) ++r.outside;
    else ++count[size_t(t)];
  }
  const double n = double(tokens.size());
  for (size_t v = 0; v < q.size(); ++v) {
    if (q[v] == 0.0) continue;
    const double e = q[v] * n, d = double(count[v]) - e;
    r.stat += d * d / e;
    ++r.df;
  }
  return r;
}

// The parameter sets of the chi-square tests (V = 64 logits, temperature
// != 1, top-k, top-p and both).
inline std::vector<ops::SamplingParams> chi_square_params() {
  std::vector<ops::SamplingParams> out;
  const struct {
    float t;
    int k;
    float p;
  } cases[] = {{0.7f, 0, 1.0f}, {1.3f, 10, 1.0f}, {0.8f, 0, 0.8f}, {1.5f, 20, 0.9f}, {0.6f, 40, 0.95f}};
  for (const auto& c : cases) {
    ops::SamplingParams p;
    p.seed = 31337;
    p.temperature = c.t;
    p.top_k = c.k;
    p.top_p = c.p;
    out.push_back(p);
  }
  return out;
}

}  // namespace dapo::test
