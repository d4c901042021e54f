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
                    tensor_f32(m.data(), {N}), tensor_f32(v.data(), {N}), p);
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
                  tensor_f32(m.data(), {3}), tensor_f32(v.data(), {3}), p);
  EXPECT_NEAR(w[0], 0.9f, 1e-6);
  EXPECT_NEAR(w[1], -1.9f, 1e-6);
  EXPECT_EQ(w[2], 0.5f);
}

TEST(AdamW, EmptyBuffer) {
  float dummy = 0;
  ops::AdamWParams p;
  ops::adamw_step(test::cpu_ctx(), tensor_f32(&dummy, {0}), tensor_f32(&dummy, {0}),
                  tensor_f32(&dummy, {0}), tensor_f32(&dummy, {0}), p);
  EXPECT_EQ(dummy, 0.0f);
}

}  // namespace
}  // namespace dapo
