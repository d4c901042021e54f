// The DAPO update phase on one rank: advantages and old log-probs are filled
// in; the first mini-batch of the first epoch is on-policy (ratio 1: no
// clipping, ppo_kl 0); the step does not depend on how the mini-batch is cut
// into micro-batches, for every loss aggregation mode, with the KL term to a
// reference and an entropy bonus; a mini-batch with nothing in the loss
// still takes its optimizer step.
#include <gtest/gtest.h>

#include <cmath>

#include "dapo/rl/advantages.h"
#include "trainer/dapo_test_util.h"

namespace dapo {
namespace {

using trainer::UpdatePhaseContext;
using trainer::UpdatePhaseResult;

optim::AdamWOptions adam() {
  optim::AdamWOptions o;
  o.weight_decay = 0.1;
  o.grad_clip = 0.5;
  o.eps = 1e-3;  // above the gradients' rounding noise: the update is smooth in the gradient
  return o;
}

UpdatePhaseContext context(test::Policy& p, LossAggMode agg, double kl, double entropy, int64_t epochs,
                           int64_t budget) {
  UpdatePhaseContext c;
  c.actor = p.actor.get();
  c.reference = p.reference.get();
  c.loss.agg = agg;
  c.loss.kl_coef = kl;
  c.loss.entropy_coeff = entropy;
  c.inv_temperature = float(1.0 / 0.9);
  c.ppo_epochs = epochs;
  c.max_token_len = budget;
  return c;
}

std::vector<int64_t> mini_batches(size_t groups, int64_t per) {
  std::vector<int64_t> m;
  for (size_t i = 0; i < groups; ++i) m.push_back(int64_t(i) / per);
  return m;
}

TEST(UpdatePhase, FillsAdvantagesAndOldLogprobsAndStartsOnPolicy) {
  const parallel::Grid grid = parallel::make_grid(1);
  const model::Qwen2Config mc = test::tiny_config(true, 2);
  test::Policy p(mc, grid, adam(), false);
  std::vector<rl::GroupData> groups = test::random_groups(4, 4, mc.vocab_size, 3);
  const UpdatePhaseResult r = trainer::run_update_phase(context(p, LossAggMode::token_mean, 0, 0, 1, 4096), grid,
                                                        groups, mini_batches(4, 4), 1, 0.05);
  EXPECT_EQ(r.optimizer_steps, 1);
  EXPECT_EQ(r.skipped_steps, 0);
  EXPECT_GT(r.grad_norm_mean, 0);
  EXPECT_LT(std::abs(r.loss.ppo_kl()), 1e-6);  // the old log-probs are the current ones
  EXPECT_EQ(r.loss.clipped, 0);
  double tokens = 0;
  for (const rl::GroupData& g : groups) {
    std::vector<double> want(g.reward.size());
    rl::grpo_group_advantages(g.reward, true, want);
    EXPECT_EQ(g.advantage, want);
    ASSERT_EQ(g.old_logprobs.size(), g.response_ids.size());
    for (const float lp : g.old_logprobs) {
      EXPECT_TRUE(std::isfinite(lp));
      EXPECT_LT(lp, 0.0f);
    }
    for (int64_t k = 0; k < g.num_responses(); ++k) tokens += g.in_loss[size_t(k)] ? double(g.response_length(k)) : 0;
  }
  EXPECT_EQ(r.loss.tokens, tokens);
  EXPECT_GT(r.loss.entropy_mean(), 0);
}

// Two mini-batches, two epochs (the second epoch is off-policy and clips),
// one budget that packs everything into one micro-batch and one that cuts
// every mini-batch into several: the same weights and metrics, up to the
// float rounding of ops over differently packed batches (~1e-6 relative,
// and it depends on the BLAS kernels: OpenBLAS's SkylakeX ones round
// otherwise than its Haswell ones).
//
// The weights' bound follows from Adam, which amplifies that rounding: a
// step moves a weight by lr m/(sqrt(v) + eps), whose derivative in the
// gradient is at most 1/eps where the gradient is near 0. A gradient
// rounding of d (~1e-7: 1e-6 relative to gradients clipped to norm 0.5)
// then moves a weight by up to lr d / eps = 0.05 x 1e-7 / 1e-3 = 5e-6 a
// step, 2e-5 over the 4 steps. 1e-4 holds that with margin, and is still
// 500x below one step's move (lr = 0.05): a wrong split (a token counted
// twice, a mean over the wrong count) changes the weights far beyond it.
TEST(UpdatePhase, MicroBatchSplitDoesNotChangeTheStep) {
  const parallel::Grid grid = parallel::make_grid(1);
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  struct Variant {
    LossAggMode agg;
    double kl, entropy;
  };
  for (const Variant v : {Variant{LossAggMode::token_mean, 0, 0}, Variant{LossAggMode::seq_mean_token_mean, 0.1, 0},
                          Variant{LossAggMode::seq_mean_token_sum, 0, 0.01}}) {
    SCOPED_TRACE(to_string(v.agg));
    std::vector<std::vector<float>> weights;
    std::vector<UpdatePhaseResult> results;
    for (const int64_t budget : {int64_t(4096), int64_t(14)}) {
      test::Policy p(mc, grid, adam(), v.kl > 0);
      std::vector<rl::GroupData> groups = test::random_groups(6, 3, mc.vocab_size, 11);
      results.push_back(trainer::run_update_phase(context(p, v.agg, v.kl, v.entropy, 2, budget), grid, groups,
                                                  mini_batches(6, 3), 2, 0.05));
      weights.push_back(test::host_copy(p.params->parameters()));
    }
    EXPECT_EQ(results[0].optimizer_steps, 4);
    EXPECT_GT(results[0].loss.clipped, 0) << "the second epoch should clip";
    EXPECT_EQ(results[0].loss.tokens, results[1].loss.tokens);
    // Metrics after the first step are taken at weights that differ as
    // bounded below: 1e-4 relative (a mean over the wrong count is off by
    // tens of percent).
    EXPECT_NEAR(results[0].loss.pg_loss, results[1].loss.pg_loss, 1e-4 * std::abs(results[0].loss.pg_loss));
    EXPECT_NEAR(results[0].loss.kl_loss, results[1].loss.kl_loss, 1e-4 * results[0].loss.kl_loss);
    EXPECT_NEAR(results[0].grad_norm_mean, results[1].grad_norm_mean, 1e-4 * results[0].grad_norm_mean);
    ASSERT_EQ(weights[0].size(), weights[1].size());
    for (size_t i = 0; i < weights[0].size(); ++i) ASSERT_NEAR(weights[0][i], weights[1][i], 1e-4) << "element " << i;
  }
}

TEST(UpdatePhase, MiniBatchWithNothingInTheLossStillSteps) {
  const parallel::Grid grid = parallel::make_grid(1);
  const model::Qwen2Config mc = test::tiny_config(true, 2);
  test::Policy p(mc, grid, adam(), false);
  std::vector<rl::GroupData> groups = test::random_groups(2, 3, mc.vocab_size, 5);
  for (rl::GroupData& g : groups) g.in_loss.assign(g.in_loss.size(), 0);
  const std::vector<float> before = test::host_copy(p.params->parameters());
  const UpdatePhaseResult r = trainer::run_update_phase(context(p, LossAggMode::token_mean, 0, 0, 1, 4096), grid,
                                                        groups, mini_batches(2, 2), 1, 0.05);
  EXPECT_EQ(r.optimizer_steps, 1);
  EXPECT_EQ(r.loss.tokens, 0);
  EXPECT_EQ(r.grad_norm_mean, 0);
  EXPECT_EQ(p.optimizer->steps_taken(), 1);
  // Weight decay alone moved the weights.
  EXPECT_NE(test::host_copy(p.params->parameters()), before);
}

}  // namespace
}  // namespace dapo
