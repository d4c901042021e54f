// The SFT step on a tiny random model (one rank): the loss it reports is
// the token-mean cross-entropy of the response tokens; the update does not
// depend on the micro-batch budget; and training on a small repeated data
// set drives the loss down by more than half in 30 steps. Also the
// UpdateRunner's scoring and the fresh random init.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "dapo/parallel/grid.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/sft_step.h"
#include "io/io_test_util.h"
#include "model/model_test_util.h"

namespace dapo::trainer {
namespace {

// n pairs of random ids: prompts of 3..6 tokens, responses of 2..7.
std::vector<SftExample> random_examples(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<SftExample> out(static_cast<size_t>(n));
  for (SftExample& ex : out) {
    const size_t P = 3 + gen() % 4, R = 2 + gen() % 6;
    for (size_t i = 0; i < P; ++i) ex.prompt_ids.push_back(int32_t(gen() % uint32_t(vocab)));
    for (size_t i = 0; i < R; ++i) ex.response_ids.push_back(int32_t(gen() % uint32_t(vocab)));
  }
  return out;
}

Config sft_config(int64_t batch, int64_t budget) {
  Config c;
  c.train.train_batch_size = batch;
  c.train.max_token_len_per_gpu = budget;
  c.train.total_steps = 30;
  c.train.activation_recompute = false;
  c.optim.lr = 1e-2;
  c.optim.warmup_steps = 0;
  c.optim.weight_decay = 0.0;
  c.optim.grad_clip = 1.0;
  c.data.seed = 5;
  return c;
}

TEST(SftStep, CrossEntropyGradientIsMinusMaskOverN) {
  SequenceSet set;
  SftExample ex{{1, 2, 3}, {4, 5}, "x"};
  add_sft_sequence(set, ex);
  // Prompt 3 + response 2: positions 2 and 3 predict the response tokens.
  EXPECT_EQ(set.mask, (std::vector<uint8_t>{0, 0, 1, 1, 0}));
  const std::vector<MicroBatch> mbs = pack_micro_batches(set, 100);
  const std::vector<float> lp{-1, -2, -3, -4, -5};
  std::vector<float> dlp(5, 0.0f);
  double loss = 0;
  cross_entropy_gradient(8, &loss)(mbs[0], ForwardOutputs{lp, lp}, dlp, {});
  EXPECT_DOUBLE_EQ(loss, 7.0 / 8.0);
  EXPECT_EQ(dlp, (std::vector<float>{0, 0, -0.125f, -0.125f, 0}));
}

TEST(SftStep, ReportedLossIsTheResponseTokenMeanCrossEntropy) {
  const parallel::Grid grid = parallel::make_grid(1);
  const model::Qwen2Config mc = test::tiny_config(true, 2);
  model::ParamStore params(mc, 0, 1);
  params.init_random(fresh_init(3));
  const std::vector<SftExample> examples = random_examples(4, mc.vocab_size, 1);
  const Config config = sft_config(4, 16);  // several micro-batches
  // The reference: score the four pairs with the initial weights.
  double want = 0;
  int64_t n = 0;
  {
    model::Qwen2Model m(params, grid.tp);
    optim::AdamW opt(params, optim::adamw_options(config.optim));
    UpdateRunner runner(m, &opt, grid);
    SequenceSet set;
    for (const SftExample& ex : examples) add_sft_sequence(set, ex);
    const std::vector<MicroBatch> mbs = pack_micro_batches(set, 1000);
    std::vector<std::vector<float>> lp, ent;
    runner.score(mbs, 1.0f, lp, ent);
    for (size_t t = 0; t < mbs[0].mask.size(); ++t)
      if (mbs[0].mask[t]) {
        want -= lp[0][t];
        ++n;
      }
    want /= double(n);
  }
  SftTrainer trainer(params, grid, config, examples);
  const SftStepResult r = trainer.step();
  EXPECT_NEAR(r.loss, want, 1e-6 * want);
  EXPECT_EQ(r.response_tokens, n);
  EXPECT_GT(r.micro_batches, 1);
  EXPECT_EQ(r.step, 1);
  EXPECT_GT(r.report.grad_norm, 0);
  const Metrics m = r.metrics(1);
  EXPECT_DOUBLE_EQ(m.get("train/loss"), r.loss);
  EXPECT_DOUBLE_EQ(m.get("actor/lr"), 1e-2);
  EXPECT_GT(m.get("perf/throughput"), 0);
  EXPECT_GT(m.get("timing_s/step"), 0);
}

TEST(SftStep, UpdateDoesNotDependOnTheMicroBatchBudget) {
  const parallel::Grid grid = parallel::make_grid(1);
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  const std::vector<SftExample> examples = random_examples(6, mc.vocab_size, 2);
  std::vector<std::vector<float>> finals;
  std::vector<double> losses;
  for (const int64_t budget : {1000, 13}) {
    model::ParamStore params(mc, 0, 1);
    params.init_random(test::tiny_init(4));
    Config config = sft_config(6, budget);
    config.optim.eps = 1e-3;  // keeps the update smooth in the gradient (summation-order noise)
    SftTrainer trainer(params, grid, config, examples);
    for (int s = 0; s < 2; ++s) losses.push_back(trainer.step().loss);
    finals.push_back(test::host_copy(params.parameters()));
  }
  EXPECT_NEAR(losses[0], losses[2], 1e-6 * losses[0]);
  EXPECT_NEAR(losses[1], losses[3], 1e-6 * losses[1]);
  ASSERT_EQ(finals[0].size(), finals[1].size());
  for (size_t i = 0; i < finals[0].size(); ++i) ASSERT_NEAR(finals[0][i], finals[1][i], 1e-6) << i;
}

TEST(SftStep, LossFallsByMoreThanHalfIn30Steps) {
  const parallel::Grid grid = parallel::make_grid(1);
  const model::Qwen2Config mc = test::tiny_config(true, 2);
  model::ParamStore params(mc, 0, 1);
  params.init_random(fresh_init(1));
  const Config config = sft_config(4, 64);
  SftTrainer trainer(params, grid, config, random_examples(8, mc.vocab_size, 3));
  EXPECT_EQ(trainer.planned_steps(), 30);
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    const SftStepResult r = trainer.step();
    ASSERT_TRUE(std::isfinite(r.loss));
    ASSERT_FALSE(r.report.skipped);
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_NEAR(first, std::log(double(mc.vocab_size)), 0.1);  // a fresh model is near uniform
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
  EXPECT_EQ(trainer.steps_done(), 30);
  EXPECT_EQ(trainer.optimizer().steps_taken(), 30);
}

TEST(SftStep, OneEpochWhenTotalStepsIsZeroAndBatchChecks) {
  const parallel::Grid grid = parallel::make_grid(1);
  const model::Qwen2Config mc = test::tiny_config(true, 2);
  model::ParamStore params(mc, 0, 1);
  Config config = sft_config(4, 64);
  config.train.total_steps = 0;
  EXPECT_EQ(SftTrainer(params, grid, config, random_examples(10, 64, 1)).planned_steps(), 2);
  EXPECT_EQ(SftTrainer(params, grid, config, random_examples(3, 64, 1)).planned_steps(), 1);
  // A pair longer than the micro-batch budget.
  config.train.max_token_len_per_gpu = 5;
  SftTrainer t(params, grid, config, random_examples(4, 64, 1));
  EXPECT_THROW(t.step(), UserError);
}

TEST(ModelInit, FreshInitHasHfScaleAndDetectsWeights) {
  const model::RandomInit init = fresh_init(9);
  EXPECT_EQ(init.seed, 9u);
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  model::ParamStore params(mc, 0, 1);
  params.init_random(init);
  double sum2 = 0;
  int64_t n = 0;
  for (const model::ParamEntry& e : params.entries()) {
    const float* p = e.param.ptr<float>();
    const bool norm = e.spec.name.find("norm") != std::string::npos;
    const bool bias = e.spec.name.ends_with(".bias");
    for (int64_t i = 0; i < e.param.numel(); ++i) {
      if (norm) ASSERT_EQ(p[i], 1.0f) << e.spec.name;
      else if (bias) ASSERT_EQ(p[i], 0.0f) << e.spec.name;
      else {
        ASSERT_LE(std::fabs(p[i]), 0.0347f);
        sum2 += double(p[i]) * p[i];
        ++n;
      }
    }
  }
  EXPECT_NEAR(std::sqrt(sum2 / double(n)), kInitStd, 0.001);
  test::TempDir dir;
  EXPECT_FALSE(has_hf_weights(dir.path().string()));
  test::write_text(dir.file("config.json"), "{}");
  EXPECT_FALSE(has_hf_weights(dir.path().string()));
  test::write_text(dir.file("model-00001-of-00002.safetensors"), "");
  EXPECT_TRUE(has_hf_weights(dir.path().string()));
}

TEST(ModelInit, ConfigOnlyDirectoryGivesASeededRandomModel) {
  const parallel::Grid grid = parallel::make_grid(1);
  Config config;
  config.model.path = std::string(DAPO_SOURCE_DIR) + "/inputs/demo/model";
  config.train.seed = 4;
  InitialModel a = load_initial_model(config, grid);
  ASSERT_TRUE(a.random_init);
  EXPECT_EQ(a.params->config().vocab_size, 392);
  InitialModel b = load_initial_model(config, grid);
  EXPECT_EQ(test::host_copy(a.params->parameters()), test::host_copy(b.params->parameters()));
  config.train.seed = 5;
  InitialModel c = load_initial_model(config, grid);
  EXPECT_NE(test::host_copy(a.params->parameters()), test::host_copy(c.params->parameters()));
  config.model.path = "/nonexistent/model";
  EXPECT_THROW(load_initial_model(config, grid), UserError);
}

}  // namespace
}  // namespace dapo::trainer
