// The optimizer on one rank: a step against torch.optim.AdamW's update
// written out by hand (a single known element, then a whole random model
// with clipping and two steps), weight decay on every parameter, the
// non-finite skip, the state views used by checkpoints, the options.
#include "dapo/optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "dapo/optim/grad_norm.h"
#include "model/model_test_util.h"

namespace dapo {
namespace {

using model::ParamEntry;
using model::ParamStore;
using optim::AdamW;
using optim::AdamWOptions;

constexpr const char* kNorm = "model.layers.0.input_layernorm.weight";
constexpr const char* kQ = "model.layers.1.self_attn.q_proj.weight";

// Writes host values into a CPU store's gradient view.
void set_grad(const ParamEntry& e, const std::vector<float>& g) {
  ASSERT_EQ(int64_t(g.size()), e.grad.numel());
  std::copy(g.begin(), g.end(), e.grad.ptr<float>());
}

std::vector<float> random_values(int64_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// Random gradients in every view (zeros in the padding), from `seed`.
void fill_grads(ParamStore& s, uint32_t seed) {
  s.zero_grad();
  uint32_t k = seed;
  for (const ParamEntry& e : s.entries()) set_grad(e, random_values(e.grad.numel(), k++, 0.02f));
}

TEST(AdamWOptimizer, OneKnownElementMatchesTorchByHand) {
  // Every parameter 0 but one, gradient 0.5 there: torch.optim.AdamW(lr=0.1,
  // betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1) moves 1.0 to
  //   1 * (1 - 0.01) - (0.1 / 0.1) * 0.05 / (sqrt(0.00025) / sqrt(0.001) + 1e-8)
  // = 0.99 - 0.05 / (0.5 + 1e-8).
  ParamStore s(test::tiny_config(false), 0, 1);
  const ParamEntry& e = s.entry(kNorm);
  e.param.ptr<float>()[3] = 1.0f;
  e.grad.ptr<float>()[3] = 0.5f;
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.grad_clip = 0;
  AdamW opt(s, o);
  const optim::StepReport r = opt.step(ops::Ctx{}, {}, 0.1);
  EXPECT_FALSE(r.skipped);
  EXPECT_DOUBLE_EQ(r.grad_norm, 0.5);
  EXPECT_EQ(r.clip_coef, 1.0);
  EXPECT_EQ(r.steps_taken, 1);
  EXPECT_EQ(r.lr, 0.1);
  EXPECT_NEAR(e.param.ptr<float>()[3], 0.99 - 0.05 / (0.5 + 1e-8), 1e-7);
  // fp32 state: ops::adamw_step forms 1 - beta in fp32 (torch rounds the
  // double 1 - beta to fp32), 1e-5 relative at beta2 = 0.999.
  EXPECT_NEAR(opt.exp_avg(kNorm).ptr<float>()[3], 0.05, 2e-8);
  EXPECT_NEAR(opt.exp_avg_sq(kNorm).ptr<float>()[3], 0.00025, 0.00025 * 2e-5);
  // Everything else stays 0: zero weights, zero gradients, zero moments.
  const float* p = s.parameters().ptr<float>();
  for (int64_t i = 0; i < s.buffer_elements(); ++i)
    if (p + i != e.param.ptr<float>() + 3) ASSERT_EQ(p[i], 0.0f) << i;
}

// torch.optim.AdamW after clip_grad_norm_, in double, over the flat buffer.
struct Reference {
  std::vector<double> p, m, v;
  int64_t step = 0;
  void update(const std::vector<float>& grad, double lr, const AdamWOptions& o, double coef) {
    ++step;
    const double bc1 = 1 - std::pow(o.beta1, double(step)), bc2 = 1 - std::pow(o.beta2, double(step));
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = double(float(double(grad[i]) * coef));  // clip_grad_norm_ scales the fp32 gradient
      p[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
    }
  }
};

std::vector<float> flat(const Tensor& t) { return test::host_copy(t); }

TEST(AdamWOptimizer, TwoClippedStepsOverAWholeModelMatchTorch) {
  ParamStore s(test::tiny_config(true), 0, 1);
  s.init_random(test::tiny_init());
  AdamWOptions o;
  o.weight_decay = 0.05;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.grad_clip = 0.1;
  AdamW opt(s, o);
  Reference ref;
  for (float x : flat(s.parameters())) ref.p.push_back(x);
  ref.m.assign(ref.p.size(), 0.0);
  ref.v.assign(ref.p.size(), 0.0);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    fill_grads(s, 100u * uint32_t(step + 1));
    const std::vector<float> g = flat(s.gradients());
    double ss = 0;
    for (float x : g) ss += double(x) * x;
    const double norm = std::sqrt(ss);
    const double coef = std::min(1.0, o.grad_clip / (norm + 1e-6));
    ASSERT_LT(coef, 0.5) << "the test should clip";
    const double lr = 1e-3 * (step + 1);
    const optim::StepReport r = opt.step(ops::Ctx{}, {}, lr);
    EXPECT_NEAR(r.grad_norm, norm, 1e-6 * norm);
    EXPECT_NEAR(r.clip_coef, coef, 1e-6 * coef);
    ref.update(g, lr, o, r.clip_coef);
    const std::vector<float> p = flat(s.parameters()), m = flat(opt.exp_avg()), v = flat(opt.exp_avg_sq());
    for (size_t i = 0; i < p.size(); ++i) {
      ASSERT_NEAR(p[i], ref.p[i], 2e-7 + 2e-6 * std::fabs(ref.p[i])) << "param " << i;
      ASSERT_NEAR(m[i], ref.m[i], 1e-9 + 1e-5 * std::fabs(ref.m[i])) << "exp_avg " << i;
      ASSERT_NEAR(v[i], ref.v[i], 1e-13 + 1e-5 * std::fabs(ref.v[i])) << "exp_avg_sq " << i;
    }
    // The gradient buffer is left as it was (the clip factor is applied inside the update).
    EXPECT_EQ(flat(s.gradients()), g);
  }
  EXPECT_EQ(opt.steps_taken(), 2);
}

TEST(AdamWOptimizer, WeightDecayAppliesToNormsAndBiasesToo) {
  ParamStore s(test::tiny_config(false), 0, 1);
  s.init_random(test::tiny_init());
  const std::vector<float> before = flat(s.param(kNorm)), bias_before = flat(s.param("model.layers.0.self_attn.q_proj.bias"));
  AdamWOptions o;
  o.weight_decay = 0.5;
  AdamW opt(s, o);
  opt.step(ops::Ctx{}, {}, 0.1);  // zero gradients: only the decay moves weights
  const std::vector<float> after = flat(s.param(kNorm)), bias_after = flat(s.param("model.layers.0.self_attn.q_proj.bias"));
  for (size_t i = 0; i < before.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i] * 0.95f);
  for (size_t i = 0; i < bias_before.size(); ++i) EXPECT_FLOAT_EQ(bias_after[i], bias_before[i] * 0.95f);
}

TEST(AdamWOptimizer, NonFiniteGradNormSkipsTheStep) {
  ParamStore s(test::tiny_config(false), 0, 1);
  s.init_random(test::tiny_init());
  AdamW opt(s, AdamWOptions{});
  fill_grads(s, 1);
  opt.step(ops::Ctx{}, {}, 1e-3);
  const std::vector<float> p = flat(s.parameters()), m = flat(opt.exp_avg()), v = flat(opt.exp_avg_sq());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    fill_grads(s, 2);
    s.grad(kQ).ptr<float>()[5] = bad;
    const optim::StepReport r = opt.step(ops::Ctx{}, {}, 1e-3);
    EXPECT_TRUE(r.skipped);
    EXPECT_FALSE(std::isfinite(r.grad_norm));
    EXPECT_EQ(r.steps_taken, 1);
    EXPECT_EQ(flat(s.parameters()), p);
    EXPECT_EQ(flat(opt.exp_avg()), m);
    EXPECT_EQ(flat(opt.exp_avg_sq()), v);
  }
  fill_grads(s, 3);
  const optim::StepReport r = opt.step(ops::Ctx{}, {}, 1e-3);
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(r.steps_taken, 2);
  EXPECT_NE(flat(s.parameters()), p);
}

TEST(AdamWOptimizer, StateViewsAndHostCopies) {
  ParamStore s(test::tiny_config(false), 0, 1);
  AdamW opt(s, AdamWOptions{});
  EXPECT_EQ(opt.exp_avg().numel(), s.buffer_elements());
  for (const ParamEntry& e : s.entries()) {
    const Tensor m = opt.exp_avg(e.spec.name), v = opt.exp_avg_sq(e.spec.name);
    EXPECT_TRUE(m.same_shape(e.param)) << e.spec.name;
    EXPECT_EQ(m.ptr<float>() - opt.exp_avg().ptr<float>(), e.offset);
    EXPECT_EQ(v.ptr<float>() - opt.exp_avg_sq().ptr<float>(), e.offset);
  }
  const ParamEntry& q = s.entry(kQ);
  const int64_t n = q.param.numel();
  const std::vector<float> m = random_values(n, 4, 1.0f), v = random_values(n, 5, 1.0f);
  opt.load_local(kQ, m.data(), v.data(), n);
  std::vector<float> m2(static_cast<size_t>(n)), v2(static_cast<size_t>(n));
  opt.read_local(kQ, m2.data(), v2.data(), n);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
  EXPECT_EQ(flat(opt.exp_avg(kQ)), m);
  opt.set_steps_taken(17);
  EXPECT_EQ(opt.steps_taken(), 17);
}

TEST(AdamWOptimizer, OptionsFromConfig) {
  OptimConfig c;
  c.weight_decay = 0.2;
  c.beta1 = 0.5;
  c.beta2 = 0.6;
  c.eps = 1e-5;
  c.grad_clip = 0;
  const AdamWOptions o = optim::adamw_options(c);
  EXPECT_EQ(o.weight_decay, 0.2);
  EXPECT_EQ(o.beta1, 0.5);
  EXPECT_EQ(o.beta2, 0.6);
  EXPECT_EQ(o.eps, 1e-5);
  EXPECT_EQ(o.grad_clip, 0);
}

TEST(AdamWOptimizerDeathTest, Misuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ParamStore s(test::tiny_config(false), 0, 1);
  AdamWOptions bad;
  bad.beta1 = 1.0;
  EXPECT_DEATH(AdamW(s, bad), "AdamW options");
  AdamW opt(s, AdamWOptions{});
  EXPECT_DEATH(opt.step(ops::Ctx{}, {}, -1.0), "AdamW lr -1");
  EXPECT_DEATH(opt.set_steps_taken(-2), "AdamW steps -2");
  std::vector<float> x(3);
  EXPECT_DEATH(opt.load_local(kQ, x.data(), x.data(), 3), "3 optimizer-state elements given");
  EXPECT_DEATH(opt.read_local(kQ, x.data(), x.data(), 3), "room for 3 optimizer-state elements");
  EXPECT_DEATH(opt.exp_avg("no.such.weight"), "the model has no parameter 'no.such.weight'");
}

}  // namespace
}  // namespace dapo
