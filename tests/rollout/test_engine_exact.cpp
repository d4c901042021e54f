// rollout.exact_logprobs on the CPU backend: under batch-invariant
// arithmetic the engine's log-prob of every sampled token is the trainer's
// (the packed forward_logprob and forward_train), bit for bit, whatever
// the batch around the token: other prompts, one sequence at a time with
// chunked prefills, a KV pool so small that sequences are preempted,
// blocks of one position, speculative rows, launch-ahead, prompts that
// share a prefix. Without it the two differ by summation order only.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"
#include "dapo/rollout/engine.h"
#include "model/model_test_util.h"
#include "rollout/engine_test_util.h"
#include "rollout/trainer_logprobs.h"

namespace dapo::rollout {
namespace {

// This file's uids: its draws are its own.
std::vector<PromptInput> prompts_of(const std::vector<int>& lengths, uint32_t seed) {
  return test::prompts_of(lengths, seed, 0x2000);
}

class EngineExactTest : public testing::Test {
 protected:
  void SetUp() override {
    config = test::tiny_config(false);
    store = std::make_unique<model::ParamStore>(config, 0, 1);
    store->init_random(test::tiny_init(9));
  }

  RolloutBatch run(const model::Qwen2Model& m, const std::vector<PromptInput>& prompts, const EngineOptions& o) {
    GenerationEngine engine(m, tp, ops::Ctx{}, o);
    RolloutBatch b = engine.generate(prompts, sampling);
    stats = engine.stats();
    b.check();
    return b;
  }

  parallel::Comm tp = parallel::Comm::world();
  model::Qwen2Config config;
  std::unique_ptr<model::ParamStore> store;
  GenerationStats stats;
  SamplingOptions sampling = [] {
    SamplingOptions s;
    s.n = 3;
    s.temperature = 0.8;
    s.max_response_length = 14;
    s.seed = 17;
    s.step = 2;
    return s;
  }();
};

using test::engine_opts;

TEST_F(EngineExactTest, EngineLogprobsAreTheTrainersBitForBit) {
  model::ModelOptions mo;
  mo.batch_invariant = true;
  const model::Qwen2Model exact(*store, tp, mo);
  // The fused head records the sampler's log-probs: never taken here.
  EXPECT_FALSE(exact.cached_sample_preferred(ops::Ctx{}, ops::SamplingParams{}));
  auto prompts = prompts_of({7, 2, 12, 5, 9, 3, 6, 4}, 4);
  // Two prompts that share their first 12 tokens, and one whose prompt
  // ends at a block boundary (block size 4).
  prompts[7].ids = prompts[2].ids;
  prompts[7].ids.push_back(5);
  prompts[3].ids.resize(8, 1);
  EngineOptions spec = engine_opts(4, 0, 0, 4096);
  spec.spec_tokens = 3;
  spec.spec_max_running = 64;
  EngineOptions ahead = engine_opts(4, 0, 0, 4096);
  ahead.launch_ahead = true;
  const struct {
    const char* what;
    EngineOptions o;
  } cases[] = {
      {"all at once", engine_opts(4, 0, 0, 4096)},
      {"one sequence at a time, 2-token steps", engine_opts(4, 0, 1, 2)},
      {"3 sequences, 5-token steps", engine_opts(4, 0, 3, 5)},
      {"8 blocks of 4: preemption", engine_opts(4, model::kv_cache_bytes(config, 1, 8, 4), 64, 64)},
      {"blocks of one position", engine_opts(1, 0, 64, 64)},
      {"speculative rows", spec},
      {"launch ahead", ahead},
  };
  const float inv_t = float(1.0 / sampling.temperature);
  std::vector<float> first;
  for (const auto& c : cases) {
    const RolloutBatch b = run(exact, prompts, c.o);
    if (std::string(c.what).starts_with("8 blocks")) EXPECT_GT(stats.scheduler.preemptions, 0);
    if (std::string(c.what).starts_with("speculative")) EXPECT_GT(stats.scheduler.drafted_tokens, 0);
    ASSERT_GT(b.total_response_tokens(), 100) << c.what;
    // Packed one response per batch and five per batch.
    for (const int64_t per_pack : {int64_t(1), int64_t(5)}) {
      const std::vector<float> trainer = test::trainer_logprobs(exact, b, inv_t, per_pack, false);
      for (size_t t = 0; t < trainer.size(); ++t)
        ASSERT_EQ(trainer[t], b.sampling_logprobs[t]) << c.what << ", " << per_pack << " per pack: token " << t;
    }
    // The same tokens in every case (the logits are the same bits).
    if (first.empty()) first = b.sampling_logprobs;
    EXPECT_EQ(b.sampling_logprobs, first) << c.what;
  }
  // The update's own forward (forward_train) gives the same bits.
  const RolloutBatch b = run(exact, prompts, engine_opts(4, 0, 0, 4096));
  EXPECT_EQ(test::trainer_logprobs(exact, b, inv_t, 4, true), b.sampling_logprobs);
}

// Qwen3 (per-head q/k norms, no q/k/v biases): under batch invariance the
// engine runs the trainer's q/k norms (not the ones fused into the cache
// write), with the same result: bit for bit at any batch.
TEST_F(EngineExactTest, Qwen3LogprobsAreTheTrainersBitForBit) {
  const model::Qwen2Config q3 = test::tiny_qwen3_config(false);
  model::ParamStore q3_store(q3, 0, 1);
  q3_store.init_random(test::tiny_init(11));
  model::ModelOptions mo;
  mo.batch_invariant = true;
  const model::Qwen2Model exact(q3_store, tp, mo);
  const auto prompts = prompts_of({7, 2, 12, 5, 9}, 6);
  const float inv_t = float(1.0 / sampling.temperature);
  std::vector<float> first;
  for (const EngineOptions& o : {engine_opts(4, 0, 0, 4096), engine_opts(4, 0, 1, 3), engine_opts(1, 0, 64, 64)}) {
    const RolloutBatch b = run(exact, prompts, o);
    ASSERT_GT(b.total_response_tokens(), 50);
    EXPECT_EQ(test::trainer_logprobs(exact, b, inv_t, 4, false), b.sampling_logprobs);
    EXPECT_EQ(test::trainer_logprobs(exact, b, inv_t, 3, true), b.sampling_logprobs);
    if (first.empty()) first = b.sampling_logprobs;
    EXPECT_EQ(b.sampling_logprobs, first);
  }
}

// Without batch invariance the engine and the trainer sum in other orders:
// the same tokens here, log-probs within fp32 rounding of each other.
TEST_F(EngineExactTest, DefaultModeDiffersOnlyByRounding) {
  const model::Qwen2Model fast(*store, tp, model::ModelOptions{});
  const RolloutBatch b = run(fast, prompts_of({7, 2, 12, 5}, 5), engine_opts(4, 0, 0, 4096));
  const float inv_t = float(1.0 / sampling.temperature);
  const std::vector<float> trainer = test::trainer_logprobs(fast, b, inv_t, 3, false);
  double max_diff = 0;
  for (size_t t = 0; t < trainer.size(); ++t)
    max_diff = std::max(max_diff, std::fabs(double(trainer[t]) - double(b.sampling_logprobs[t])));
  // Log-probs of a 64-token vocabulary near -4; fp32 sums of products of
  // length 32-128 round at ~1e-7 relative: 1e-4 is far above that.
  EXPECT_LT(max_diff, 1e-4);
}

}  // namespace
}  // namespace dapo::rollout
