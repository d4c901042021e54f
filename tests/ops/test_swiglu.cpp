// SwiGLU: forward against the formula, backward against finite differences.
#include "dapo/ops/swiglu.h"

#include "ops/op_test_util.h"

namespace dapo {
namespace {

TEST(Swiglu, ForwardMatchesFormula) {
  const int64_t N = 5, I = 7;
  auto gate = test::random_vector(N * I, 1, -4, 4), up = test::random_vector(N * I, 2);
  std::vector<float> out(N * I);
  ops::swiglu_forward(test::cpu_ctx(), tensor_f32(out.data(), {N, I}), tensor_f32(gate.data(), {N, I}),
                      tensor_f32(up.data(), {N, I}));
  for (int64_t i = 0; i < N * I; ++i) {
    const double g = gate[i];
    EXPECT_NEAR(out[i], g / (1 + std::exp(-g)) * up[i], 1e-6);
  }
}

TEST(Swiglu, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, I = 6;
  auto gate = test::random_vector(N * I, 3, -3, 3), up = test::random_vector(N * I, 4);
  auto dout = test::random_vector(N * I, 5);
  std::vector<float> dgate(N * I), dup(N * I), out(N * I);
  const auto ctx = test::cpu_ctx();
  ops::swiglu_backward(ctx, tensor_f32(dgate.data(), {N, I}), tensor_f32(dup.data(), {N, I}),
                       tensor_f32(dout.data(), {N, I}), tensor_f32(gate.data(), {N, I}),
                       tensor_f32(up.data(), {N, I}));
  auto loss = [&] {
    ops::swiglu_forward(ctx, tensor_f32(out.data(), {N, I}), tensor_f32(gate.data(), {N, I}),
                        tensor_f32(up.data(), {N, I}));
    return test::dot(dout, out);
  };
  test::expect_gradient("dgate", gate, dgate, loss);
  test::expect_gradient("dup", up, dup, loss);
}

}  // namespace
}  // namespace dapo
