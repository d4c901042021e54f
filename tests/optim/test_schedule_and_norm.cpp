// The warmup schedule (verl's constant-with-warmup), torch's clip factor,
// and the global grad norm on one rank (primary entries, padding, a store
// split for tp without its Comm). The tp and dp cases run in tests/mpi.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dapo/optim/grad_norm.h"
#include "dapo/optim/lr_schedule.h"
#include "model/model_test_util.h"

namespace dapo {
namespace {

TEST(LrSchedule, LinearWarmupFromZeroThenConstant) {
  const double lr = 1e-3;
  EXPECT_EQ(optim::warmup_lr(lr, 4, 0), 0.0);  // verl's first step runs at lr 0
  EXPECT_DOUBLE_EQ(optim::warmup_lr(lr, 4, 1), 2.5e-4);
  EXPECT_DOUBLE_EQ(optim::warmup_lr(lr, 4, 2), 5e-4);
  EXPECT_DOUBLE_EQ(optim::warmup_lr(lr, 4, 3), 7.5e-4);
  EXPECT_EQ(optim::warmup_lr(lr, 4, 4), lr);
  EXPECT_EQ(optim::warmup_lr(lr, 4, 1000), lr);
  EXPECT_EQ(optim::warmup_lr(lr, 0, 0), lr);  // no warmup
  EXPECT_EQ(optim::warmup_lr(lr, 1, 0), 0.0);
  EXPECT_EQ(optim::warmup_lr(lr, 1, 1), lr);
  OptimConfig c;
  c.lr = 2e-6;
  c.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(optim::warmup_lr(c, 5), 1e-6);
}

TEST(ClipCoefficient, TorchClipGradNormFactor) {
  EXPECT_DOUBLE_EQ(optim::clip_coefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(optim::clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(optim::clip_coefficient(0.0, 1.0), 1.0);
  EXPECT_EQ(optim::clip_coefficient(1e9, 0.0), 1.0);  // clipping off
  EXPECT_TRUE(std::isnan(optim::clip_coefficient(std::numeric_limits<double>::infinity(), 1.0)));
  EXPECT_TRUE(std::isnan(optim::clip_coefficient(std::numeric_limits<double>::quiet_NaN(), 0.0)));
}

TEST(GradNorm, EqualsTheNormOfEveryGradientOnOneRank) {
  model::ParamStore s(test::tiny_config(false), 0, 1);
  double ss = 0;
  uint32_t seed = 1;
  for (const model::ParamEntry& e : s.entries()) {
    const std::vector<float> g = test::uniform_vector(size_t(e.grad.numel()), seed++);
    std::copy(g.begin(), g.end(), e.grad.ptr<float>());
    for (float x : g) ss += double(x) * x;
  }
  const double norm = optim::global_grad_norm(ops::Ctx{}, s, nullptr);
  EXPECT_NEAR(norm, std::sqrt(ss), 1e-6 * std::sqrt(ss));
  s.zero_grad();
  EXPECT_EQ(optim::global_grad_norm(ops::Ctx{}, s, nullptr), 0.0);
}

TEST(GradNorm, NonPrimaryEntriesAreLeftOut) {
  // tp rank 1 of 2: its norm weights are copies of rank 0's, not counted;
  // with every gradient 1 the local sum of squares counts primary elements.
  model::ParamStore s(test::tiny_config(false), 1, 2);
  double primary = 0;
  int non_primary = 0;
  for (const model::ParamEntry& e : s.entries()) {
    std::fill(e.grad.ptr<float>(), e.grad.ptr<float>() + e.grad.numel(), 1.0f);
    if (e.primary) primary += double(e.grad.numel());
    non_primary += !e.primary;
  }
  ASSERT_GT(non_primary, 0);
  EXPECT_EQ(optim::local_grad_sum_squares(ops::Ctx{}, s), primary);
  model::ParamStore r0(test::tiny_config(false), 0, 2);
  double all0 = 0;
  for (const model::ParamEntry& e : r0.entries()) {
    std::fill(e.grad.ptr<float>(), e.grad.ptr<float>() + e.grad.numel(), 2.0f);
    EXPECT_TRUE(e.primary) << e.spec.name;  // rank 0 counts everything it holds
    all0 += 4.0 * double(e.grad.numel());
  }
  EXPECT_EQ(optim::local_grad_sum_squares(ops::Ctx{}, r0), all0);
}

TEST(GradNormDeathTest, Misuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  model::ParamStore s(test::tiny_config(false), 1, 2);
  EXPECT_DEATH(optim::global_grad_norm(ops::Ctx{}, s, nullptr), "a tp-split ParamStore needs its tp Comm for the norm");
  EXPECT_DEATH(optim::warmup_lr(0.0, 1, 0), "warmup_lr\\(0, 1, 0\\)");
  EXPECT_DEATH(optim::warmup_lr(1e-3, -1, 0), "warmup_lr");
  EXPECT_DEATH(optim::clip_coefficient(1.0, -1.0), "max_norm -1");
  ops::Ctx gpu;
  gpu.backend = ops::Backend::cuda;
  model::ParamStore one(test::tiny_config(false), 0, 1);
  EXPECT_DEATH(optim::local_grad_sum_squares(gpu, one), "gradients on cpu, ops on cuda");
}

}  // namespace
}  // namespace dapo
