// Helpers for op tests: random buffers, naive comparisons and finite-
// difference gradient checks of fp32 ops (central differences, loss
// accumulated in double so that the check is limited by the op, not by it).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "dapo/ops/context.h"

namespace dapo::test {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// A KV-cache write's rows: T positions in [0, 32768) and T distinct slots
// of a pool of `slots_total` (>= T), every fifth row's (i % 5 == 3) -1, a
// row that writes nothing.
struct PositionsAndSlots {
  std::vector<int32_t> pos, slots;
};
inline PositionsAndSlots random_positions_and_slots(int64_t T, int64_t slots_total, uint32_t seed) {
  std::mt19937 gen(seed);
  PositionsAndSlots r{std::vector<int32_t>(size_t(T)), std::vector<int32_t>(size_t(T))};
  for (auto& p : r.pos) p = int32_t(gen() % 32768);
  std::vector<int32_t> all(static_cast<size_t>(slots_total));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), gen);
  for (int64_t i = 0; i < T; ++i) r.slots[size_t(i)] = i % 5 == 3 ? -1 : all[size_t(i)];
  return r;
}

// sum_i g[i] * y[i] in double: the scalar loss whose gradient an op's
// backward computes when given g as the upstream gradient.
inline double dot(const std::vector<float>& g, const std::vector<float>& y) {
  double s = 0;
  for (size_t i = 0; i < g.size(); ++i) s += double(g[i]) * double(y[i]);
  return s;
}

// Checks analytic[i] against (loss(x+h) - loss(x-h)) / 2h for up to
// max_checks indices spread over x. loss() must recompute from x.
inline void expect_gradient(const char* what, std::vector<float>& x, const std::vector<float>& analytic,
                            const std::function<double()>& loss, size_t max_checks = 64,
                            float h = 1e-2f, double atol = 2e-3, double rtol = 2e-2) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const size_t stride = std::max<size_t>(1, x.size() / max_checks);
  for (size_t i = 0; i < x.size(); i += stride) {
    const float saved = x[i];
    x[i] = saved + h;
    const double lp = loss();
    x[i] = saved - h;
    const double lm = loss();
    x[i] = saved;
    const double numeric = (lp - lm) / (2.0 * double(h));
    EXPECT_NEAR(analytic[i], numeric, atol + rtol * std::fabs(numeric)) << what << " index " << i;
  }
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                         double atol = 1e-5, double rtol = 1e-5, const char* what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " index " << i;
}

inline ops::Ctx cpu_ctx() { return ops::Ctx{}; }

}  // namespace dapo::test
