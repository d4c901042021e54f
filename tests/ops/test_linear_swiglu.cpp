// The fused gate/up products + SwiGLU on the CPU backend: the formula (its
// scratch holding the two products), and bad shapes rejected with the
// offending tensor named.
#include "dapo/ops/matmul.h"

#include <cmath>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

TEST(LinearSwiglu, MatchesTheFormula) {
  const int64_t M = 3, K = 5, I = 4;
  auto in = test::random_vector(M * K, 1, -2, 2), wg = test::random_vector(I * K, 2), wu = test::random_vector(I * K, 3);
  std::vector<float> h(M * I), gate(M * I), up(M * I);
  ops::linear_swiglu_forward(test::cpu_ctx(), tensor_f32(h.data(), {M, I}), tensor_f32(gate.data(), {M, I}),
                             tensor_f32(up.data(), {M, I}), tensor_f32(in.data(), {M, K}),
                             tensor_f32(wg.data(), {I, K}), tensor_f32(wu.data(), {I, K}));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) {
        g += double(in[m * K + k]) * wg[i * K + k];
        u += double(in[m * K + k]) * wu[i * K + k];
      }
      EXPECT_NEAR(gate[m * I + i], g, 1e-5);
      EXPECT_NEAR(up[m * I + i], u, 1e-5);
      EXPECT_NEAR(h[m * I + i], g / (1 + std::exp(-g)) * u, 1e-5) << "row " << m << " column " << i;
    }
}

TEST(LinearSwigluDeathTest, BadShapesAreRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int64_t M = 2, K = 3, I = 4;
  auto in = test::random_vector(M * K, 4), wg = test::random_vector(I * K, 5), wu = test::random_vector(I * K, 6);
  std::vector<float> h(M * I), gate(M * I), up(M * I);
  const auto ctx = test::cpu_ctx();
  // up_proj's weight one row short.
  EXPECT_DEATH(ops::linear_swiglu_forward(ctx, tensor_f32(h.data(), {M, I}), tensor_f32(gate.data(), {M, I}),
                                          tensor_f32(up.data(), {M, I}), tensor_f32(in.data(), {M, K}),
                                          tensor_f32(wg.data(), {I, K}), tensor_f32(wu.data(), {I - 1, K})),
               "w_up has shape");
  // h narrower than the intermediate size.
  EXPECT_DEATH(ops::linear_swiglu_forward(ctx, tensor_f32(h.data(), {M, I - 1}), tensor_f32(gate.data(), {M, I}),
                                          tensor_f32(up.data(), {M, I}), tensor_f32(in.data(), {M, K}),
                                          tensor_f32(wg.data(), {I, K}), tensor_f32(wu.data(), {I, K})),
               "h has shape");
  // The unfused path's scratch: gate one row short, up on top of h.
  EXPECT_DEATH(ops::linear_swiglu_forward(ctx, tensor_f32(h.data(), {M, I}), tensor_f32(gate.data(), {M - 1, I}),
                                          tensor_f32(up.data(), {M, I}), tensor_f32(in.data(), {M, K}),
                                          tensor_f32(wg.data(), {I, K}), tensor_f32(wu.data(), {I, K})),
               "gate has shape");
  EXPECT_DEATH(ops::linear_swiglu_forward(ctx, tensor_f32(h.data(), {M, I}), tensor_f32(gate.data(), {M, I}),
                                          tensor_f32(h.data(), {M, I}), tensor_f32(in.data(), {M, K}),
                                          tensor_f32(wg.data(), {I, K}), tensor_f32(wu.data(), {I, K})),
               "up overlaps h");
  // A folded norm of the wrong row count.
  std::vector<float> ssq(M + 1);
  EXPECT_DEATH(ops::linear_swiglu_forward(ctx, tensor_f32(h.data(), {M, I}), tensor_f32(gate.data(), {M, I}),
                                          tensor_f32(up.data(), {M, I}), tensor_f32(in.data(), {M, K}),
                                          tensor_f32(wg.data(), {I, K}), tensor_f32(wu.data(), {I, K}),
                                          ops::RowNorm{tensor_f32(ssq.data(), {M + 1, 1}), 1e-6f}),
               "linear_swiglu_forward: row-norm sums of squares");
}

}  // namespace
}  // namespace dapo
