// AdamW: several steps against torch.optim.AdamW's update written out in
// double, with weight decay, gradient scaling and bias correction.
#include "dapo/ops/adamw.h"

#include "ops/op_test_util.h"

namespace dapo {
namespace {

struct RefState {
  std::vector<double> param, m, v;
};

// torch.optim.AdamW (amsgrad=False) for one step, in double.
void reference_step(RefState& s, const std::vector<float>& grad, const ops::AdamWParams& p) {
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2, eps = p.eps, wd = p.weight_decay;
  const double bc1 = 1 - std::pow(b1, double(p.step)), bc2 = 1 - std::pow(b2, double(p.step));
  for (size_t i = 0; i < grad.size(); ++i) {
    const double g = double(grad[i]) * double(p.grad_scale);
    s.param[i] *= 1 - lr * wd;
    s.m[i] = b1 * s.m[i] + (1 - b1) * g;
    s.v[i] = b2 * s.v[i] + (1 - b2) * g * g;
    s.param[i] -= (lr / bc1) * s.m[i] / (std::sqrt(s.v[i]) / std::sqrt(bc2) + eps);
  }
}

void expect_state(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  const char* what, int step) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-7 + rtol * std::fabs(want[i])) << what << " step " << step << " index " << i;
}

void run_steps(const ops::AdamWParams& base, int steps, int64_t N, uint32_t seed) {
  auto param = test::random_vector(N, seed, -1, 1);
  std::vector<float> m(N, 0.0f), v(N, 0.0f);
  RefState ref{std::vector<double>(param.begin(), param.end()), std::vector<double>(N, 0.0),
               std::vector<double>(N, 0.0)};
  for (int step = 1; step <= steps; ++step) {
    // Gradients of very different sizes, some zero, change every step.
    auto grad = test::random_vector(N, seed + 100 + step, -2, 2);
    for (int64_t i = 0; i < N; i += 7) grad[i] *= 1e-4f;
    for (int64_t i = 3; i < N; i += 11) grad[i] = 0.0f;
    const auto grad_copy = grad;
    ops::AdamWParams p = base;
    p.step = step;
    ops::adamw_step(test::cpu_ctx(), tensor_f32(param.data(), {N}), tensor_f32(grad.data(), {N}),
                    tensor_f32(m.data(), {N}), tensor_f32(v.data(), {N}), Tensor{}, p);
    reference_step(ref, grad, p);
    ASSERT_EQ(grad, grad_copy) << "grad must be read only";
    expect_state(param, ref.param, 2e-6, "param", step);
    expect_state(m, ref.m, 2e-6, "exp_avg", step);
    expect_state(v, ref.v, 2e-6, "exp_avg_sq", step);
  }
}

TEST(AdamW, MatchesTorchFormulaOverSteps) {
  ops::AdamWParams p;
  p.lr = 1e-2f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-8f;
  p.weight_decay = 0.0f;
  run_steps(p, 6, 1003, 1);
}

TEST(AdamW, WeightDecayAndGradScale) {
  ops::AdamWParams p;
  p.lr = 3e-3f;
  p.beta1 = 0.8f;
  p.beta2 = 0.95f;
  p.eps = 1e-6f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.37f;
  run_steps(p, 5, 517, 2);
}

TEST(AdamW, FirstStepIsSignedLearningRate) {
  // Step 1 with no decay: mhat = g, vhat = g^2, so the update is lr * g / (|g| + eps).
  std::vector<float> w{1.0f, -2.0f, 0.5f}, g{0.3f, -4.0f, 0.0f}, m(3, 0.0f), v(3, 0.0f);
  ops::AdamWParams p;
  p.lr = 0.1f;
  p.weight_decay = 0.0f;
  p.step = 1;
  ops::adamw_step(test::cpu_ctx(), tensor_f32(w.data(), {3}), tensor_f32(g.data(), {3}),
                  tensor_f32(m.data(), {3}), tensor_f32(v.data(), {3}), Tensor{}, p);
  EXPECT_NEAR(w[0], 0.9f, 1e-6);
  EXPECT_NEAR(w[1], -1.9f, 1e-6);
  EXPECT_EQ(w[2], 0.5f);
}

TEST(AdamW, EmptyBuffer) {
  float dummy = 0;
  ops::AdamWParams p;
  ops::adamw_step(test::cpu_ctx(), tensor_f32(&dummy, {0}), tensor_f32(&dummy, {0}),
                  tensor_f32(&dummy, {0}), tensor_f32(&dummy, {0}), Tensor{}, p);
  EXPECT_EQ(dummy, 0.0f);
}

TEST(AdamW, Bf16CopyIsTheRoundedUpdatedParam) {
  // The same step with and without the copy: identical state, and the copy
  // is to_bf16 of the updated param, element by element (any shape of N).
  const int64_t N = 1001;
  auto w1 = test::random_vector(N, 7, -3, 3);
  auto g = test::random_vector(N, 8, -1, 1);
  std::vector<float> m1(N, 0.01f), v1(N, 0.02f);
  auto w2 = w1, m2 = m1, v2 = v1;
  std::vector<bf16> copy(N, bf16{0x7fc0});
  ops::AdamWParams p;
  p.lr = 1e-2f;
  p.step = 3;
  p.grad_scale = 0.5f;
  ops::adamw_step(test::cpu_ctx(), tensor_f32(w1.data(), {N}), tensor_f32(g.data(), {N}), tensor_f32(m1.data(), {N}),
                  tensor_f32(v1.data(), {N}), Tensor{}, p);
  ops::adamw_step(test::cpu_ctx(), tensor_f32(w2.data(), {N}), tensor_f32(g.data(), {N}), tensor_f32(m2.data(), {N}),
                  tensor_f32(v2.data(), {N}), tensor_bf16(copy.data(), {7, 11, 13}), p);
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(copy[i].bits, to_bf16(w2[i]).bits) << i;
}

TEST(AdamWDeathTest, Bf16CopyOfTheWrongSizeOrDtypeFails) {
  std::vector<float> w(4, 1.0f), g(4, 0.5f), m(4, 0.0f), v(4, 0.0f);
  std::vector<bf16> small(3);
  ops::AdamWParams p;
  auto f = [](std::vector<float>& x) { return tensor_f32(x.data(), {4}); };
  EXPECT_DEATH(ops::adamw_step(test::cpu_ctx(), f(w), f(g), f(m), f(v), tensor_bf16(small.data(), {3}), p),
               "param_bf16");
  std::vector<float> wrong(4);
  EXPECT_DEATH(ops::adamw_step(test::cpu_ctx(), f(w), f(g), f(m), f(v), f(wrong), p), "param_bf16");
}

}  // namespace
}  // namespace dapo
