// The norm folded into the products (norm_fold.h) on the CPU backend:
// linear_residual_fold is the product, the residual add, y = sum * weight
// and the parts' sums of squares (sum in place of res too); a RowNorm over
// its output gives rmsnorm(sum) * weight; the consumers (q/k/v + RoPE + cache
// write, gate/up + SwiGLU) with the RowNorm equal the same ops on the normed
// rows; the CPU never prefers folding; bad shapes are refused by name.
#include "dapo/ops/norm_fold.h"

#include <cmath>

#include "dapo/ops/matmul.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

constexpr float kEps = 1e-6f;

struct Folded {
  std::vector<float> sum, y, ssq;
};

Folded fold(int64_t M, int64_t K, int64_t C, std::vector<float>& in, std::vector<float>& w, std::vector<float>& res,
            std::vector<float>& g) {
  Folded f{std::vector<float>(M * C), std::vector<float>(M * C), std::vector<float>(ops::norm_fold_parts(C) * M)};
  ops::linear_residual_fold(test::cpu_ctx(), f32(f.sum, {M, C}), f32(f.y, {M, C}),
                            f32(f.ssq, {M, ops::norm_fold_parts(C)}), f32(in, {M, K}), f32(w, {C, K}),
                            f32(res, {M, C}), f32(g, {C}));
  return f;
}

TEST(NormFold, LinearResidualFoldIsProductAddScaleAndParts) {
  for (auto [M, K, C] : {std::tuple<int64_t, int64_t, int64_t>{3, 7, 40}, {1, 5, 32}, {4, 9, 70}, {0, 4, 8}}) {
    SCOPED_TRACE(testing::Message() << "M " << M << " K " << K << " C " << C);
    auto in = test::random_vector(M * K, 1), w = test::random_vector(C * K, 2), res = test::random_vector(M * C, 3);
    auto g = test::random_vector(C, 4, 0.5f, 1.5f);
    const Folded f = fold(M, K, C, in, w, res, g);
    std::vector<float> prod(M * C);
    ops::linear_forward(test::cpu_ctx(), f32(prod, {M, C}), f32(in, {M, K}), f32(w, {C, K}), Tensor{});
    const int64_t P = ops::norm_fold_parts(C);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t p = 0; p < P; ++p) {
        double part = 0;
        for (int64_t c = p * 32; c < std::min<int64_t>(C, p * 32 + 32); ++c) {
          const float s = res[m * C + c] + prod[m * C + c];
          EXPECT_EQ(f.sum[m * C + c], s) << "row " << m << " column " << c;
          EXPECT_EQ(f.y[m * C + c], s * g[c]);
          part += double(s) * s;
        }
        EXPECT_NEAR(f.ssq[m * P + p], part, 1e-5 * (1 + part)) << "row " << m << " part " << p;
      }
    }
    // sum in place of res: the same results.
    auto res2 = res;
    std::vector<float> y2(M * C), ssq2(P * M);
    ops::linear_residual_fold(test::cpu_ctx(), f32(res2, {M, C}), f32(y2, {M, C}), f32(ssq2, {M, P}),
                              f32(in, {M, K}), f32(w, {C, K}), f32(res2, {M, C}), f32(g, {C}));
    EXPECT_EQ(res2, f.sum);
    EXPECT_EQ(y2, f.y);
    EXPECT_EQ(ssq2, f.ssq);
  }
}

TEST(NormFold, RowNormOfTheFoldIsTheRmsnorm) {
  const int64_t M = 5, K = 6, C = 70;
  auto in = test::random_vector(M * K, 5), w = test::random_vector(C * K, 6), res = test::random_vector(M * C, 7);
  auto g = test::random_vector(C, 8, 0.5f, 1.5f);
  Folded f = fold(M, K, C, in, w, res, g);
  std::vector<float> want(M * C), rstd(M);
  ops::rmsnorm_forward(test::cpu_ctx(), f32(want, {M, C}), f32(rstd, {M}), f32(f.sum, {M, C}), f32(g, {C}), kEps);
  ops::row_norm_apply(test::cpu_ctx(), f32(f.y, {M, C}), ops::RowNorm{f32(f.ssq, {M, 3}), kEps});
  test::expect_close(f.y, want, 1e-5, 1e-5);
}

// The consumers on y with the RowNorm against the same op on the normed rows.
TEST(NormFold, ConsumersTakeTheRowNorm) {
  const int64_t M = 4, K = 40, I = 24, Hq = 4, Hkv = 2, D = 8;
  auto x = test::random_vector(M * K, 9, -2, 2), g = test::random_vector(K, 10, 0.5f, 1.5f);
  const int64_t P = ops::norm_fold_parts(K);
  std::vector<float> y(M * K), ssq(P * M, 0.0f), normed(M * K), rstd(M);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < K; ++c) {
      y[m * K + c] = x[m * K + c] * g[c];
      ssq[m * P + c / 32] += x[m * K + c] * x[m * K + c];
    }
  ops::rmsnorm_forward(test::cpu_ctx(), f32(normed, {M, K}), f32(rstd, {M}), f32(x, {M, K}), f32(g, {K}), kEps);
  const ops::Ctx ctx = test::cpu_ctx();

  auto wg = test::random_vector(I * K, 11), wu = test::random_vector(I * K, 12);
  std::vector<float> h(M * I), h_want(M * I), gate(M * I), up(M * I);
  auto y1 = y;
  ops::linear_swiglu_forward(ctx, f32(h, {M, I}), f32(gate, {M, I}), f32(up, {M, I}), f32(y1, {M, K}), f32(wg, {I, K}),
                             f32(wu, {I, K}), ops::RowNorm{f32(ssq, {M, P}), kEps});
  ops::linear_swiglu_forward(ctx, f32(h_want, {M, I}), f32(gate, {M, I}), f32(up, {M, I}), f32(normed, {M, K}),
                             f32(wg, {I, K}), f32(wu, {I, K}));
  test::expect_close(h, h_want, 1e-5, 1e-4, "swiglu");

  auto wq = test::random_vector(Hq * D * K, 13), wk = test::random_vector(Hkv * D * K, 14),
       wv = test::random_vector(Hkv * D * K, 15), bq = test::random_vector(Hq * D, 16);
  std::vector<int32_t> pos{0, 5, 9, 2}, slots{3, 0, -1, 6};
  auto run = [&](std::vector<float>& in, const ops::RowNorm& rn, std::vector<float>& kc) {
    std::vector<float> q(M * Hq * D), k(M * Hkv * D), v(M * Hkv * D), vc(kc.size(), 0.0f);
    const ops::LinearSegment segs[] = {{f32(q, {M, Hq * D}), f32(wq, {Hq * D, K}), f32(bq, {Hq * D})},
                                       {f32(k, {M, Hkv * D}), f32(wk, {Hkv * D, K}), Tensor{}},
                                       {f32(v, {M, Hkv * D}), f32(wv, {Hkv * D, K}), Tensor{}}};
    ops::qkv_rope_kv_write(ctx, f32(in, {M, K}), segs, f32(kc, {2, 4, Hkv, D}), f32(vc, {2, 4, Hkv, D}),
                           tensor_i32(pos.data(), {M}), tensor_i32(slots.data(), {M}), ops::kRopeThetaQwen2, rn);
    return q;
  };
  std::vector<float> kc(2 * 4 * Hkv * D, 0.0f), kc_want(kc.size(), 0.0f);
  auto y2 = y;
  const auto q = run(y2, ops::RowNorm{f32(ssq, {M, P}), kEps}, kc);
  const auto q_want = run(normed, ops::RowNorm{}, kc_want);
  test::expect_close(q, q_want, 1e-5, 1e-4, "q");
  test::expect_close(kc, kc_want, 1e-5, 1e-4, "k cache");
}

TEST(NormFold, TheCpuNeverPrefersFolding) {
  for (int64_t M : {1, 64, 128, 1000}) EXPECT_FALSE(ops::norm_fold_preferred(test::cpu_ctx(), M, 896, 4864));
}

TEST(NormFoldDeathTest, BadShapesAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int64_t M = 2, K = 3, C = 40;
  auto in = test::random_vector(M * K, 1), w = test::random_vector(C * K, 2), res = test::random_vector(M * C, 3);
  auto g = test::random_vector(C, 4);
  std::vector<float> sum(M * C), y(M * C), ssq(2 * M);
  const auto ctx = test::cpu_ctx();
  // ssq of one part for 40 columns (two parts).
  EXPECT_EXIT(ops::linear_residual_fold(ctx, f32(sum, {M, C}), f32(y, {M, C}), f32(ssq, {M, 1}), f32(in, {M, K}),
                                        f32(w, {C, K}), f32(res, {M, C}), f32(g, {C})),
              testing::ExitedWithCode(1), "ssq");
  // y overlapping sum.
  EXPECT_EXIT(ops::linear_residual_fold(ctx, f32(sum, {M, C}), f32(sum, {M, C}), f32(ssq, {M, 2}), f32(in, {M, K}),
                                        f32(w, {C, K}), f32(res, {M, C}), f32(g, {C})),
              testing::ExitedWithCode(1), "y overlaps");
  // A row norm with eps 0, and one with the wrong row count.
  EXPECT_EXIT(ops::row_norm_apply(ctx, f32(y, {M, C}), ops::RowNorm{f32(ssq, {M, 2}), 0.0f}),
              testing::ExitedWithCode(1), "eps");
  EXPECT_EXIT(ops::row_norm_apply(ctx, f32(y, {1, C}), ops::RowNorm{f32(ssq, {M, 2}), kEps}),
              testing::ExitedWithCode(1), "row-norm sums of squares");
  // One dtype for all but ssq: a bf16 norm weight among f32 tensors.
  std::vector<bf16> gh(C);
  EXPECT_EXIT(ops::linear_residual_fold(ctx, f32(sum, {M, C}), f32(y, {M, C}), f32(ssq, {M, 2}), f32(in, {M, K}),
                                        f32(w, {C, K}), f32(res, {M, C}), tensor_bf16(gh.data(), {C})),
              testing::ExitedWithCode(1), "linear_residual_fold: norm_weight is bf16, expected f32");
}

}  // namespace
}  // namespace dapo
