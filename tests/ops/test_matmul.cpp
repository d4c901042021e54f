// matmul / linear: forward against naive double loops for every transpose
// combination, beta = 0 discarding NaN, degenerate sizes; linear backward
// against finite differences, its overwrite (din) and accumulate (dweight,
// dbias) semantics, and a thread-count-independent bias gradient.
#include "dapo/ops/matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

// C (M,N) = alpha * op(A) op(B) + beta * C in double, A/B stored as given.
std::vector<double> naive_matmul(const std::vector<float>& a, const std::vector<float>& b,
                                 const std::vector<float>& c, int64_t M, int64_t N, int64_t K,
                                 bool ta, bool tb, double alpha, double beta) {
  std::vector<double> out(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = ta ? a[k * M + m] : a[m * K + k];
        const double bv = tb ? b[n * K + k] : b[k * N + n];
        s += av * bv;
      }
      out[m * N + n] = alpha * s + (beta == 0 ? 0.0 : beta * c[m * N + n]);
    }
  return out;
}

void expect_near_double(const std::vector<float>& got, const std::vector<double>& want, double tol,
                        const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " index " << i;
}

Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

void run_matmul(int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, float beta,
                uint32_t seed) {
  auto a = test::random_vector(size_t(M * K), seed);
  auto b = test::random_vector(size_t(K * N), seed + 1);
  auto c = test::random_vector(size_t(M * N), seed + 2);
  const auto want = naive_matmul(a, b, c, M, N, K, ta, tb, alpha, beta);
  Tensor at = ta ? f32(a, {K, M}) : f32(a, {M, K});
  Tensor bt = tb ? f32(b, {N, K}) : f32(b, {K, N});
  ops::matmul(test::cpu_ctx(), f32(c, {M, N}), at, bt, ta, tb, alpha, beta);
  expect_near_double(c, want, 1e-5, "matmul");
}

TEST(Matmul, AllTransposeCombinationsMatchNaive) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb);
      run_matmul(7, 5, 9, ta, tb, 1.0f, 0.0f, 10);
      run_matmul(7, 5, 9, ta, tb, 0.7f, -0.4f, 20);
      run_matmul(1, 13, 3, ta, tb, -1.5f, 1.0f, 30);
      run_matmul(17, 1, 1, ta, tb, 2.0f, 0.5f, 40);
      run_matmul(33, 65, 31, ta, tb, 1.0f, 1.0f, 50);
    }
}

TEST(Matmul, BetaZeroIgnoresOldContents) {
  const int64_t M = 6, N = 4, K = 5;
  auto a = test::random_vector(M * K, 1), b = test::random_vector(K * N, 2);
  std::vector<float> c(M * N, std::numeric_limits<float>::quiet_NaN());
  c[3] = std::numeric_limits<float>::infinity();
  const auto want = naive_matmul(a, b, c, M, N, K, false, false, 1.0, 0.0);
  ops::matmul(test::cpu_ctx(), f32(c, {M, N}), f32(a, {M, K}), f32(b, {K, N}), false, false, 1.0f,
              0.0f);
  expect_near_double(c, want, 1e-5, "beta=0");
}

TEST(Matmul, EmptyInnerDimensionScalesC) {
  const int64_t M = 3, N = 4;
  std::vector<float> a, b;
  auto c = test::random_vector(M * N, 3);
  const auto c0 = c;
  ops::matmul(test::cpu_ctx(), f32(c, {M, N}), f32(a, {M, 0}), f32(b, {0, N}), false, false, 1.0f,
              2.0f);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], 2.0f * c0[i]);
  std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
  ops::matmul(test::cpu_ctx(), f32(c, {M, N}), f32(a, {0, M}), f32(b, {N, 0}), true, true, 1.0f,
              0.0f);
  for (float v : c) EXPECT_EQ(v, 0.0f);
}

TEST(Matmul, EmptyOutputIsANoOp) {
  auto a = test::random_vector(4 * 3, 4), b = test::random_vector(3 * 5, 5);
  std::vector<float> c;
  ops::matmul(test::cpu_ctx(), f32(c, {0, 5}), f32(a, {0, 3}), f32(b, {3, 5}), false, false, 1, 0);
  ops::matmul(test::cpu_ctx(), f32(c, {4, 0}), f32(a, {4, 3}), f32(b, {3, 0}), false, false, 1, 0);
}

// ---- linear -------------------------------------------------------------------

struct LinearCase {
  int64_t N, I, O;
  bool bias;
};

std::vector<double> naive_linear(const std::vector<float>& in, const std::vector<float>& w,
                                 const std::vector<float>* bias, int64_t N, int64_t I, int64_t O) {
  std::vector<double> out(size_t(N * O));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double s = bias ? double((*bias)[o]) : 0.0;
      for (int64_t i = 0; i < I; ++i) s += double(in[n * I + i]) * double(w[o * I + i]);
      out[n * O + o] = s;
    }
  return out;
}

TEST(Linear, ForwardMatchesNaive) {
  for (const LinearCase& lc : {LinearCase{6, 11, 5, true}, LinearCase{6, 11, 5, false},
                               LinearCase{1, 3, 70, true}, LinearCase{0, 4, 3, true}}) {
    SCOPED_TRACE(testing::Message() << "N " << lc.N << " I " << lc.I << " O " << lc.O << " bias " << lc.bias);
    auto in = test::random_vector(lc.N * lc.I, 1), w = test::random_vector(lc.O * lc.I, 2);
    auto bias = test::random_vector(lc.O, 3);
    std::vector<float> out(lc.N * lc.O, std::numeric_limits<float>::quiet_NaN());
    ops::linear_forward(test::cpu_ctx(), f32(out, {lc.N, lc.O}), f32(in, {lc.N, lc.I}),
                        f32(w, {lc.O, lc.I}), lc.bias ? f32(bias, {lc.O}) : Tensor{});
    expect_near_double(out, naive_linear(in, w, lc.bias ? &bias : nullptr, lc.N, lc.I, lc.O), 1e-5,
                       "linear out");
  }
}

// The products of the decode step's few rows (1-9, past any kernel's row
// block) by odd and Qwen-like widths, as the CUDA harness's reference runs
// them: BLAS libraries pick small-matrix kernels by shape and CPU (OpenBLAS
// has SkylakeX ones), and the CPU backend is every comparison's reference.
// Bound: fp32 sums of I terms, |error| <= I * 2^-23 * sum |in * w| (plus the
// bias's rounding).
TEST(Linear, ForwardOfFewRowsMatchesNaive) {
  uint32_t seed = 40;
  for (int64_t N = 1; N <= 9; ++N)
    for (const int64_t I : {8, 40, 136, 904})
      for (const int64_t O : {1, 5, 37, 130}) {
        SCOPED_TRACE(testing::Message() << "N " << N << " I " << I << " O " << O);
        auto in = test::random_vector(N * I, seed++), w = test::random_vector(O * I, seed++);
        auto bias = test::random_vector(O, seed++);
        std::vector<float> out(size_t(N * O), std::numeric_limits<float>::quiet_NaN());
        ops::linear_forward(test::cpu_ctx(), f32(out, {N, O}), f32(in, {N, I}), f32(w, {O, I}), f32(bias, {O}));
        const std::vector<double> want = naive_linear(in, w, &bias, N, I, O);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t o = 0; o < O; ++o) {
            double mag = std::fabs(double(bias[size_t(o)]));
            for (int64_t i = 0; i < I; ++i) mag += std::fabs(double(in[size_t(n * I + i)]) * w[size_t(o * I + i)]);
            const double tol = (double(I) + 2) * 0x1p-23 * mag;
            ASSERT_NEAR(out[size_t(n * O + o)], want[size_t(n * O + o)], tol) << "row " << n << " column " << o;
          }
      }
}

// Under Ctx::batch_invariant (rollout.exact_logprobs) a row's bits do not
// depend on the rows around it: each row alone equals its row in batches
// of every size, for linear_forward (with and without a bias),
// linear_residual_forward and the fused ops built on them; the values
// keep the bound of ForwardOfFewRowsMatchesNaive (a 16-lane sum in a fixed
// tree rounds like any fp32 sum of I terms).
TEST(Linear, BatchInvariantRowsDoNotDependOnTheBatch) {
  ops::Ctx ctx = test::cpu_ctx();
  ctx.batch_invariant = true;
  uint32_t seed = 90;
  for (const int64_t I : {1, 15, 16, 17, 136, 904})
    for (const int64_t O : {1, 63, 64, 65, 130}) {
      SCOPED_TRACE(testing::Message() << "I " << I << " O " << O);
      const int64_t N = 37;
      auto in = test::random_vector(N * I, seed++), w = test::random_vector(O * I, seed++);
      auto bias = test::random_vector(O, seed++), res = test::random_vector(N * O, seed++);
      std::vector<float> all(size_t(N * O)), all_res(size_t(N * O));
      ops::linear_forward(ctx, f32(all, {N, O}), f32(in, {N, I}), f32(w, {O, I}), f32(bias, {O}));
      ops::linear_residual_forward(ctx, f32(all_res, {N, O}), f32(in, {N, I}), f32(w, {O, I}), f32(res, {N, O}));
      const std::vector<double> want = naive_linear(in, w, &bias, N, I, O);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) {
          double mag = std::fabs(double(bias[size_t(o)]));
          for (int64_t i = 0; i < I; ++i) mag += std::fabs(double(in[size_t(n * I + i)]) * w[size_t(o * I + i)]);
          ASSERT_NEAR(all[size_t(n * O + o)], want[size_t(n * O + o)], (double(I) + 2) * 0x1p-23 * mag);
        }
      // Row slices [r0, r1) of every length, at every offset class.
      for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, 1}, {5, 6}, {3, 11}, {36, 37}, {1, 37}}) {
        const int64_t n = r1 - r0;
        std::vector<float> part(size_t(n * O)), part_res(size_t(n * O));
        std::vector<float> in_part(in.begin() + r0 * I, in.begin() + r1 * I);
        std::vector<float> res_part(res.begin() + r0 * O, res.begin() + r1 * O);
        ops::linear_forward(ctx, f32(part, {n, O}), f32(in_part, {n, I}), f32(w, {O, I}), f32(bias, {O}));
        ops::linear_residual_forward(ctx, f32(part_res, {n, O}), f32(in_part, {n, I}), f32(w, {O, I}),
                                     f32(res_part, {n, O}));
        EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + r0 * O)) << "rows " << r0 << ".." << r1;
        EXPECT_TRUE(std::equal(part_res.begin(), part_res.end(), all_res.begin() + r0 * O))
            << "residual rows " << r0 << ".." << r1;
      }
    }
}

// out = res + in @ weight^T, into another buffer and in place; a res that
// only partly overlaps out is refused.
TEST(Linear, ResidualForwardMatchesNaive) {
  for (const LinearCase& lc : {LinearCase{6, 11, 5, false}, LinearCase{1, 3, 70, false}, LinearCase{4, 0, 3, false},
                               LinearCase{0, 4, 3, false}})
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << "N " << lc.N << " I " << lc.I << " O " << lc.O << " in place " << in_place);
      auto in = test::random_vector(lc.N * lc.I, 1), w = test::random_vector(lc.O * lc.I, 2);
      auto res = test::random_vector(lc.N * lc.O, 3);
      const std::vector<float> res0 = res;
      std::vector<float> out(lc.N * lc.O, std::numeric_limits<float>::quiet_NaN());
      if (in_place) out = res;
      ops::linear_residual_forward(test::cpu_ctx(), f32(out, {lc.N, lc.O}), f32(in, {lc.N, lc.I}),
                                   f32(w, {lc.O, lc.I}), in_place ? f32(out, {lc.N, lc.O}) : f32(res, {lc.N, lc.O}));
      std::vector<double> want = naive_linear(in, w, nullptr, lc.N, lc.I, lc.O);
      for (size_t i = 0; i < want.size(); ++i) want[i] += double(res0[i]);
      expect_near_double(out, want, 1e-5, "linear_residual out");
      EXPECT_EQ(res, res0) << "res was written";
    }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> buf(9 * 4), in(8 * 2), w(4 * 2);
  EXPECT_DEATH(ops::linear_residual_forward(test::cpu_ctx(), tensor_f32(buf.data(), {8, 4}), f32(in, {8, 2}),
                                            f32(w, {4, 2}), tensor_f32(buf.data() + 4, {8, 4})),
               "res overlaps out without being out");
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int64_t N = 5, I = 7, O = 6;
  auto in = test::random_vector(N * I, 11), w = test::random_vector(O * I, 12);
  auto bias = test::random_vector(O, 13), dout = test::random_vector(N * O, 14);
  std::vector<float> din(N * I), dw(O * I, 0.0f), db(O, 0.0f), out(N * O);
  const auto ctx = test::cpu_ctx();
  ops::linear_backward(ctx, f32(din, {N, I}), f32(dw, {O, I}), f32(db, {O}), f32(dout, {N, O}),
                       f32(in, {N, I}), f32(w, {O, I}));
  auto loss = [&] {
    ops::linear_forward(ctx, f32(out, {N, O}), f32(in, {N, I}), f32(w, {O, I}), f32(bias, {O}));
    return test::dot(dout, out);
  };
  test::expect_gradient("din", in, din, loss);
  test::expect_gradient("dweight", w, dw, loss);
  test::expect_gradient("dbias", bias, db, loss);
}

TEST(Linear, BackwardOverwritesInputGradAndAccumulatesParamGrads) {
  const int64_t N = 9, I = 5, O = 70;  // O crosses a bias-sum column chunk
  auto in = test::random_vector(N * I, 21), w = test::random_vector(O * I, 22);
  auto dout = test::random_vector(N * O, 23);
  const auto dw0 = test::random_vector(O * I, 24), db0 = test::random_vector(O, 25);
  auto dw = dw0, db = db0;
  std::vector<float> din(N * I, std::numeric_limits<float>::quiet_NaN());

  // Exact gradients in double.
  std::vector<double> gin(N * I, 0), gw(O * I, 0), gb(O, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const double g = dout[n * O + o];
      gb[o] += g;
      for (int64_t i = 0; i < I; ++i) {
        gin[n * I + i] += g * w[o * I + i];
        gw[o * I + i] += g * in[n * I + i];
      }
    }
  for (int call = 1; call <= 2; ++call) {
    SCOPED_TRACE(testing::Message() << "call " << call);
    ops::linear_backward(test::cpu_ctx(), f32(din, {N, I}), f32(dw, {O, I}), f32(db, {O}),
                         f32(dout, {N, O}), f32(in, {N, I}), f32(w, {O, I}));
    expect_near_double(din, gin, 1e-5, "din");  // overwritten: the same after both calls
    std::vector<double> want_w(O * I), want_b(O);
    for (size_t k = 0; k < want_w.size(); ++k) want_w[k] = dw0[k] + call * gw[k];
    for (size_t k = 0; k < want_b.size(); ++k) want_b[k] = db0[k] + call * gb[k];
    expect_near_double(dw, want_w, 1e-5, "dweight");
    expect_near_double(db, want_b, 1e-5, "dbias");
  }
}

TEST(Linear, AbsentInputGradientAndBiasAreSkipped) {
  const int64_t N = 4, I = 3, O = 2;
  auto in = test::random_vector(N * I, 31), w = test::random_vector(O * I, 32);
  auto dout = test::random_vector(N * O, 33);
  std::vector<float> dw(O * I, 0.0f), dw_ref(O * I, 0.0f), din(N * I), db(O, 0.0f);
  ops::linear_backward(test::cpu_ctx(), Tensor{}, f32(dw, {O, I}), Tensor{}, f32(dout, {N, O}),
                       f32(in, {N, I}), f32(w, {O, I}));
  ops::linear_backward(test::cpu_ctx(), f32(din, {N, I}), f32(dw_ref, {O, I}), f32(db, {O}),
                       f32(dout, {N, O}), f32(in, {N, I}), f32(w, {O, I}));
  EXPECT_EQ(dw, dw_ref);
}

TEST(Linear, BiasGradientIndependentOfThreadCount) {
  const int64_t N = 1001, I = 3, O = 130;
  auto in = test::random_vector(N * I, 41), w = test::random_vector(O * I, 42);
  auto dout = test::random_vector(N * O, 43, -100, 100);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3, 7}) {
    omp_set_num_threads(threads);
    std::vector<float> dw(O * I, 0.0f), db(O, 0.5f);
    ops::linear_backward(test::cpu_ctx(), Tensor{}, f32(dw, {O, I}), f32(db, {O}), f32(dout, {N, O}),
                         f32(in, {N, I}), f32(w, {O, I}));
    results.push_back(db);
  }
  omp_set_num_threads(saved);
  for (size_t r = 1; r < results.size(); ++r)
    EXPECT_EQ(0, std::memcmp(results[0].data(), results[r].data(), O * sizeof(float)));
}

// The header's contract is checked before the backend: what it refuses
// (operands of two dtypes, f32 operands into bf16, aliasing) fails in the
// op's name; bf16, which the contract allows, fails in the f32 reference.
TEST(MatmulDeathTest, TheContractIsCheckedBeforeTheBackend) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> a(4 * 3), b(3 * 2), c(4 * 2);
  std::vector<bf16> ah(4 * 3), bh(3 * 2), ch(4 * 2);
  const auto ctx = test::cpu_ctx();
  EXPECT_DEATH(ops::matmul(ctx, f32(c, {4, 2}), tensor_bf16(ah.data(), {4, 3}), f32(b, {3, 2}), false, false, 1, 0),
               "matmul: b is f32, expected bf16");
  EXPECT_DEATH(ops::matmul(ctx, tensor_bf16(ch.data(), {4, 2}), f32(a, {4, 3}), f32(b, {3, 2}), false, false, 1, 0),
               "matmul: f32 operands into a bf16 c");
  EXPECT_DEATH(ops::matmul(ctx, f32(c, {4, 2}), f32(a, {4, 3}), f32(b, {2, 3}), false, false, 1, 0),
               "b has shape \\(2, 3\\), expected \\(3, 2\\)");
  EXPECT_DEATH(ops::matmul(ctx, f32(a, {4, 2}), f32(a, {4, 3}), f32(b, {3, 2}), false, false, 1, 0),
               "matmul: output c overlaps an input");
  EXPECT_DEATH(ops::matmul(ctx, f32(c, {4, 2}), tensor_bf16(ah.data(), {4, 3}), tensor_bf16(bh.data(), {3, 2}),
                           false, false, 1, 0),
               "a is bf16, expected f32");
  // linear_forward: a bias of another shape; linear_backward: din on top
  // of in (dweight reads in after din is written), a bf16 dweight.
  std::vector<float> in(4 * 3), w(2 * 3), out(4 * 2), bias(3), dout(4 * 2), dw(2 * 3), din(4 * 3);
  EXPECT_DEATH(ops::linear_forward(ctx, f32(out, {4, 2}), f32(in, {4, 3}), f32(w, {2, 3}), f32(bias, {3})),
               "bias has shape");
  EXPECT_DEATH(ops::linear_backward(ctx, f32(in, {4, 3}), f32(dw, {2, 3}), Tensor{}, f32(dout, {4, 2}),
                                    f32(in, {4, 3}), f32(w, {2, 3})),
               "linear_backward: din overlaps");
  std::vector<bf16> dwh(2 * 3);
  EXPECT_DEATH(ops::linear_backward(ctx, f32(din, {4, 3}), tensor_bf16(dwh.data(), {2, 3}), Tensor{},
                                    f32(dout, {4, 2}), f32(in, {4, 3}), f32(w, {2, 3})),
               "linear_backward: dweight is bf16, expected f32");
}

}  // namespace
}  // namespace dapo
