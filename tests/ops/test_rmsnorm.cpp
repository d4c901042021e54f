// RMSNorm: forward (out and the saved rstd) against a double-precision
// formula, backward against finite differences for in and weight, din
// overwritten / dweight accumulated, a zero row, and a dweight that is
// bitwise the same for any thread count.
#include "dapo/ops/rmsnorm.h"

#include <omp.h>

#include <cstring>
#include <limits>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

TEST(Rmsnorm, ForwardMatchesFormula) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{5, 13}, {1, 1}, {3, 150}, {0, 8}}) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    const float eps = 1e-6f;
    auto x = test::random_vector(N * C, 1, -3, 3), w = test::random_vector(C, 2, 0.5f, 1.5f);
    std::vector<float> out(N * C), rstd(N);
    ops::rmsnorm_forward(test::cpu_ctx(), f32(out, {N, C}), f32(rstd, {N}), f32(x, {N, C}),
                         f32(w, {C}), eps);
    for (int64_t n = 0; n < N; ++n) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += double(x[n * C + c]) * x[n * C + c];
      const double r = 1.0 / std::sqrt(ss / C + eps);
      EXPECT_NEAR(rstd[n], r, 1e-6 * r);
      for (int64_t c = 0; c < C; ++c) {
        const double want = double(x[n * C + c]) * r * w[c];
        ASSERT_NEAR(out[n * C + c], want, 1e-6 * (1 + std::fabs(want))) << n << "," << c;
      }
    }
  }
}

TEST(Rmsnorm, ZeroRowUsesEps) {
  const int64_t C = 6;
  const float eps = 1e-5f;
  std::vector<float> x(C, 0.0f), w(C, 1.0f), out(C, 1.0f), rstd(1), dout(C, 1.0f), din(C), dw(C, 0.0f);
  ops::rmsnorm_forward(test::cpu_ctx(), f32(out, {1, C}), f32(rstd, {1}), f32(x, {1, C}), f32(w, {C}), eps);
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(double(eps)), 1e-6 / std::sqrt(double(eps)));
  for (float v : out) EXPECT_EQ(v, 0.0f);
  ops::rmsnorm_backward(test::cpu_ctx(), f32(din, {1, C}), f32(dw, {C}), f32(dout, {1, C}),
                        f32(x, {1, C}), f32(w, {C}), f32(rstd, {1}));
  for (float v : din) EXPECT_NEAR(v, rstd[0], 1e-3);  // only the direct term survives at x = 0
  for (float v : dw) EXPECT_EQ(v, 0.0f);
}

TEST(Rmsnorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 11;
  const float eps = 1e-6f;
  auto x = test::random_vector(N * C, 3, -2, 2), w = test::random_vector(C, 4, 0.5f, 1.5f);
  auto dout = test::random_vector(N * C, 5);
  std::vector<float> out(N * C), rstd(N), din(N * C), dw(C, 0.0f);
  const auto ctx = test::cpu_ctx();
  ops::rmsnorm_forward(ctx, f32(out, {N, C}), f32(rstd, {N}), f32(x, {N, C}), f32(w, {C}), eps);
  ops::rmsnorm_backward(ctx, f32(din, {N, C}), f32(dw, {C}), f32(dout, {N, C}), f32(x, {N, C}),
                        f32(w, {C}), f32(rstd, {N}));
  std::vector<float> r2(N);
  auto loss = [&] {
    ops::rmsnorm_forward(ctx, f32(out, {N, C}), f32(r2, {N}), f32(x, {N, C}), f32(w, {C}), eps);
    return test::dot(dout, out);
  };
  test::expect_gradient("din", x, din, loss);
  test::expect_gradient("dweight", w, dw, loss);
}

TEST(Rmsnorm, BackwardOverwritesDinAndAccumulatesDweight) {
  const int64_t N = 7, C = 70;
  auto x = test::random_vector(N * C, 6), w = test::random_vector(C, 7);
  auto dout = test::random_vector(N * C, 8);
  std::vector<float> out(N * C), rstd(N);
  ops::rmsnorm_forward(test::cpu_ctx(), f32(out, {N, C}), f32(rstd, {N}), f32(x, {N, C}), f32(w, {C}), 1e-6f);
  // Exact gradient in double from the saved rstd.
  std::vector<double> gx(N * C), gw(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const double r = rstd[n];
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += double(w[c]) * dout[n * C + c] * x[n * C + c];
    for (int64_t c = 0; c < C; ++c) {
      gx[n * C + c] = r * w[c] * dout[n * C + c] - double(x[n * C + c]) * r * r * r * dot / C;
      gw[c] += double(dout[n * C + c]) * x[n * C + c] * r;
    }
  }
  const auto dw0 = test::random_vector(C, 9);
  auto dw = dw0;
  std::vector<float> din(N * C, std::numeric_limits<float>::quiet_NaN());
  for (int call = 1; call <= 2; ++call) {
    ops::rmsnorm_backward(test::cpu_ctx(), f32(din, {N, C}), f32(dw, {C}), f32(dout, {N, C}),
                          f32(x, {N, C}), f32(w, {C}), f32(rstd, {N}));
    for (size_t k = 0; k < din.size(); ++k)
      ASSERT_NEAR(din[k], gx[k], 1e-5 * (1 + std::fabs(gx[k]))) << "call " << call << " din " << k;
    for (int64_t c = 0; c < C; ++c)
      ASSERT_NEAR(dw[c], dw0[c] + call * gw[c], 1e-5 * (1 + std::fabs(gw[c]))) << "call " << call << " dw " << c;
  }
}

TEST(Rmsnorm, DweightIndependentOfThreadCount) {
  const int64_t N = 999, C = 130;
  auto x = test::random_vector(N * C, 10, -5, 5), w = test::random_vector(C, 11);
  auto dout = test::random_vector(N * C, 12, -5, 5);
  std::vector<float> out(N * C), rstd(N), din(N * C);
  ops::rmsnorm_forward(test::cpu_ctx(), f32(out, {N, C}), f32(rstd, {N}), f32(x, {N, C}), f32(w, {C}), 1e-6f);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    std::vector<float> dw(C, 0.125f);
    ops::rmsnorm_backward(test::cpu_ctx(), f32(din, {N, C}), f32(dw, {C}), f32(dout, {N, C}),
                          f32(x, {N, C}), f32(w, {C}), f32(rstd, {N}));
    results.push_back(dw);
  }
  omp_set_num_threads(saved);
  for (size_t r = 1; r < results.size(); ++r)
    EXPECT_EQ(0, std::memcmp(results[0].data(), results[r].data(), C * sizeof(float)));
}

TEST(RmsnormDeathTest, InPlaceIsRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto x = test::random_vector(2 * 3, 13), w = test::random_vector(3, 14);
  std::vector<float> rstd(2);
  EXPECT_DEATH(ops::rmsnorm_forward(test::cpu_ctx(), f32(x, {2, 3}), f32(rstd, {2}), f32(x, {2, 3}),
                                    f32(w, {3}), 1e-6f),
               "overlap");
}

}  // namespace
}  // namespace dapo
