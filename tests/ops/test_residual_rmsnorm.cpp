// Fused residual add + RMSNorm: the forward equals the add followed by
// rmsnorm_forward (also with sum in place of a or b), the backward matches
// finite differences through a, b and weight, accumulates into dsum and
// dweight (equal to rmsnorm_backward's din added to dsum), dweight is
// bitwise the same for any thread count, and overlaps are rejected.

#include <omp.h>

#include <cstring>

#include "dapo/ops/rmsnorm.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

TEST(ResidualRmsnorm, ForwardIsAddThenRmsnorm) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{5, 13}, {1, 1}, {3, 150}, {0, 8}}) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    auto a = test::random_vector(N * C, 1, -3, 3), b = test::random_vector(N * C, 2, -3, 3);
    auto w = test::random_vector(C, 3, 0.5f, 1.5f);
    std::vector<float> sum(N * C), out(N * C), rstd(N);
    ops::residual_rmsnorm_forward(test::cpu_ctx(), f32(sum, {N, C}), f32(out, {N, C}), f32(rstd, {N}),
                                  f32(a, {N, C}), f32(b, {N, C}), f32(w, {C}), 1e-6f);
    std::vector<float> want_sum(N * C), want_out(N * C), want_rstd(N);
    for (int64_t i = 0; i < N * C; ++i) want_sum[i] = a[i] + b[i];
    ops::rmsnorm_forward(test::cpu_ctx(), f32(want_out, {N, C}), f32(want_rstd, {N}), f32(want_sum, {N, C}),
                         f32(w, {C}), 1e-6f);
    EXPECT_EQ(sum, want_sum);
    EXPECT_EQ(out, want_out);
    EXPECT_EQ(rstd, want_rstd);
  }
}

TEST(ResidualRmsnorm, SumMayBeAOrB) {
  const int64_t N = 6, C = 33;
  const auto a = test::random_vector(N * C, 4, -2, 2), b = test::random_vector(N * C, 5, -2, 2);
  auto w = test::random_vector(C, 6, 0.5f, 1.5f);
  std::vector<float> sum(N * C), out(N * C), rstd(N);
  auto a1 = a, b1 = b;
  ops::residual_rmsnorm_forward(test::cpu_ctx(), f32(sum, {N, C}), f32(out, {N, C}), f32(rstd, {N}),
                                f32(a1, {N, C}), f32(b1, {N, C}), f32(w, {C}), 1e-6f);
  for (int which = 0; which < 2; ++which) {
    auto a2 = a, b2 = b;
    std::vector<float> out2(N * C), rstd2(N);
    Tensor s = which == 0 ? f32(a2, {N, C}) : f32(b2, {N, C});
    ops::residual_rmsnorm_forward(test::cpu_ctx(), s, f32(out2, {N, C}), f32(rstd2, {N}), f32(a2, {N, C}),
                                  f32(b2, {N, C}), f32(w, {C}), 1e-6f);
    EXPECT_EQ(which == 0 ? a2 : b2, sum) << "sum in place of " << (which == 0 ? "a" : "b");
    EXPECT_EQ(out2, out);
    EXPECT_EQ(rstd2, rstd);
  }
}

TEST(ResidualRmsnorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 11;
  const float eps = 1e-6f;
  auto a = test::random_vector(N * C, 7, -2, 2), b = test::random_vector(N * C, 8, -1, 1);
  auto w = test::random_vector(C, 9, 0.5f, 1.5f), dout = test::random_vector(N * C, 10);
  std::vector<float> sum(N * C), out(N * C), rstd(N), dsum(N * C, 0.0f), dw(C, 0.0f);
  const auto ctx = test::cpu_ctx();
  ops::residual_rmsnorm_forward(ctx, f32(sum, {N, C}), f32(out, {N, C}), f32(rstd, {N}), f32(a, {N, C}),
                                f32(b, {N, C}), f32(w, {C}), eps);
  ops::residual_rmsnorm_backward(ctx, f32(dsum, {N, C}), f32(dw, {C}), f32(dout, {N, C}), f32(sum, {N, C}),
                                 f32(w, {C}), f32(rstd, {N}));
  std::vector<float> s2(N * C), r2(N);
  auto loss = [&] {
    ops::residual_rmsnorm_forward(ctx, f32(s2, {N, C}), f32(out, {N, C}), f32(r2, {N}), f32(a, {N, C}),
                                  f32(b, {N, C}), f32(w, {C}), eps);
    return test::dot(dout, out);
  };
  test::expect_gradient("da", a, dsum, loss);  // dsum started at 0: it is the gradient of a and of b
  test::expect_gradient("db", b, dsum, loss);
  test::expect_gradient("dweight", w, dw, loss);
}

TEST(ResidualRmsnorm, BackwardAccumulatesRmsnormGradient) {
  const int64_t N = 7, C = 70;
  auto a = test::random_vector(N * C, 11), b = test::random_vector(N * C, 12);
  auto w = test::random_vector(C, 13), dout = test::random_vector(N * C, 14);
  std::vector<float> sum(N * C), out(N * C), rstd(N);
  const auto ctx = test::cpu_ctx();
  ops::residual_rmsnorm_forward(ctx, f32(sum, {N, C}), f32(out, {N, C}), f32(rstd, {N}), f32(a, {N, C}),
                                f32(b, {N, C}), f32(w, {C}), 1e-6f);
  std::vector<float> din(N * C), dw_plain(C, 0.0f);
  ops::rmsnorm_backward(ctx, f32(din, {N, C}), f32(dw_plain, {C}), f32(dout, {N, C}), f32(sum, {N, C}),
                        f32(w, {C}), f32(rstd, {N}));
  const auto dsum0 = test::random_vector(N * C, 15), dw0 = test::random_vector(C, 16);
  auto dsum = dsum0, dw = dw0;
  for (int call = 1; call <= 2; ++call) {
    ops::residual_rmsnorm_backward(ctx, f32(dsum, {N, C}), f32(dw, {C}), f32(dout, {N, C}), f32(sum, {N, C}),
                                   f32(w, {C}), f32(rstd, {N}));
    for (int64_t i = 0; i < N * C; ++i)
      ASSERT_NEAR(dsum[i], dsum0[i] + call * din[i], 1e-5 * (1 + std::fabs(din[i]))) << "call " << call << " " << i;
    for (int64_t c = 0; c < C; ++c)
      ASSERT_NEAR(dw[c], dw0[c] + call * dw_plain[c], 1e-5 * (1 + std::fabs(dw_plain[c]))) << "call " << call;
  }
}

TEST(ResidualRmsnorm, DweightIndependentOfThreadCount) {
  const int64_t N = 999, C = 130;
  auto sum = test::random_vector(N * C, 17, -5, 5), w = test::random_vector(C, 18);
  auto dout = test::random_vector(N * C, 19, -5, 5), rstd = test::random_vector(N, 20, 0.1f, 2.0f);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    std::vector<float> dw(C, 0.125f), dsum(N * C, 0.5f);
    ops::residual_rmsnorm_backward(test::cpu_ctx(), f32(dsum, {N, C}), f32(dw, {C}), f32(dout, {N, C}),
                                   f32(sum, {N, C}), f32(w, {C}), f32(rstd, {N}));
    results.push_back(dw);
  }
  omp_set_num_threads(saved);
  for (size_t r = 1; r < results.size(); ++r)
    EXPECT_EQ(0, std::memcmp(results[0].data(), results[r].data(), C * sizeof(float)));
}

TEST(ResidualRmsnormDeathTest, OverlapsAreRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int64_t N = 2, C = 4;
  auto a = test::random_vector(N * C + 1, 21), b = test::random_vector(N * C, 22), w = test::random_vector(C, 23);
  std::vector<float> out(N * C), rstd(N), dw(C);
  const auto ctx = test::cpu_ctx();
  // sum shifted by one element against a: a partial overlap.
  EXPECT_DEATH(ops::residual_rmsnorm_forward(ctx, tensor_f32(a.data() + 1, {N, C}), f32(out, {N, C}),
                                             f32(rstd, {N}), tensor_f32(a.data(), {N, C}), f32(b, {N, C}),
                                             f32(w, {C}), 1e-6f),
               "overlaps");
  // out on top of the sum (the residual stream).
  EXPECT_DEATH(ops::residual_rmsnorm_forward(ctx, tensor_f32(a.data(), {N, C}), tensor_f32(a.data(), {N, C}),
                                             f32(rstd, {N}), tensor_f32(a.data(), {N, C}), f32(b, {N, C}),
                                             f32(w, {C}), 1e-6f),
               "overlaps");
  // dsum on top of dout.
  EXPECT_DEATH(ops::residual_rmsnorm_backward(ctx, f32(b, {N, C}), f32(dw, {C}), f32(b, {N, C}),
                                              tensor_f32(a.data(), {N, C}), f32(w, {C}), f32(rstd, {N})),
               "overlap");
}

}  // namespace
}  // namespace dapo
