// The generation engine under tensor and data parallelism (mpirun -np 2 and
// 4): with tp = 2 and tp = world (tp = 4 replicates the KV heads) the engine
// samples exactly the responses of tp = 1 computed by each rank alone on a
// one-rank Comm, greedy and sampled, with roomy and tight KV budgets, and
// the tp ranks of a group agree on every token (check_tp_agreement on);
// with dp, each dp group generating its share of the prompts gets the same
// responses as one rank generating them all.
#include <gtest/gtest.h>

#include <string>

#include "dapo/core/error.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/grid.h"
#include "dapo/rollout/engine.h"
#include "model/model_test_util.h"
#include "rollout/trainer_logprobs.h"

namespace dapo {
namespace {

using parallel::Comm;
using rollout::EngineOptions;
using rollout::GenerationEngine;
using rollout::PromptInput;
using rollout::RolloutBatch;
using rollout::SamplingOptions;

std::vector<PromptInput> test_prompts(int count) {
  std::vector<PromptInput> out;
  for (int i = 0; i < count; ++i) {
    PromptInput p;
    p.uid = 7000 + uint64_t(i) * 13;
    for (int t = 0; t < 2 + (i * 5) % 11; ++t) p.ids.push_back(int32_t((i * 17 + t * 29) % 64));
    out.push_back(p);
  }
  return out;
}

SamplingOptions options(double temperature) {
  SamplingOptions s;
  s.n = 3;
  s.temperature = temperature;
  s.top_p = 0.9;
  s.max_response_length = 9;
  s.seed = 21;
  s.step = 2;
  s.eos_ids = {5};
  return s;
}

// Response r of `got` equals response r_want of `want` (tokens exactly).
void expect_response(const RolloutBatch& got, int64_t r, const RolloutBatch& want, int64_t r_want,
                     const std::string& what) {
  const auto a = got.response(r), b = want.response(r_want);
  ASSERT_EQ(std::vector<int32_t>(a.begin(), a.end()), std::vector<int32_t>(b.begin(), b.end())) << what << " " << r;
  EXPECT_EQ(got.finish_reason[size_t(r)], want.finish_reason[size_t(r_want)]) << what << " " << r;
  const auto la = got.logprobs(r), lb = want.logprobs(r_want);
  for (size_t t = 0; t < lb.size(); ++t) EXPECT_NEAR(la[t], lb[t], 1e-4) << what << " " << r << " token " << t;
}

class RolloutTp : public testing::TestWithParam<int> {  // tp; 0: the whole world
 protected:
  void SetUp() override {
    world = Comm::world();
    tp = GetParam() == 0 ? world.size() : GetParam();
    if (world.size() % tp != 0) GTEST_SKIP() << "tp " << tp << " does not divide " << world.size();
    grid = parallel::make_grid(world, tp);
    self = world.split(world.rank(), 0);
    config = test::tiny_config(false);
  }

  Comm world, self;
  parallel::Grid grid;
  int tp = 1;
  model::Qwen2Config config;
};

TEST_P(RolloutTp, ResponsesEqualTpOne) {
  model::ParamStore full(config, 0, 1), part(config, grid.tp_rank, tp);
  full.init_random(test::tiny_init(31));
  part.init_random(test::tiny_init(31));
  const model::Qwen2Model m1(full, self), mt(part, grid.tp);
  const auto prompts = test_prompts(5);
  for (const double temperature : {0.0, 1.0}) {
    const SamplingOptions s = options(temperature);
    GenerationEngine one(m1, self, ops::Ctx{});
    const RolloutBatch want = one.generate(prompts, s);
    EngineOptions roomy;
    roomy.check_tp_agreement = true;
    EngineOptions tight = roomy;
    tight.block_size = 2;
    tight.kv_cache_bytes = model::kv_cache_bytes(config, tp, 12, 2);
    tight.max_num_seqs = 4;
    tight.max_batch_tokens = 5;
    // Ranks that would size different pools (as free GPU memory differs by
    // rank) take the group's smallest: the same schedule on every rank,
    // checked at the end of every run even without check_tp_agreement.
    EngineOptions ragged = tight;
    ragged.check_tp_agreement = false;
    ragged.kv_cache_bytes = model::kv_cache_bytes(config, tp, 12 + 5 * grid.tp_rank, 2);
    for (const EngineOptions& o : {roomy, tight, ragged}) {
      GenerationEngine engine(mt, grid.tp, ops::Ctx{}, o);
      const RolloutBatch got = engine.generate(prompts, s);
      ASSERT_EQ(got.num_responses(), want.num_responses());
      const std::string what = "tp " + std::to_string(tp) + " T " + std::to_string(temperature) +
                               (o.kv_cache_bytes ? (o.check_tp_agreement ? " tight" : " ragged") : " roomy");
      for (int64_t r = 0; r < want.num_responses(); ++r) expect_response(got, r, want, r, what);
      if (o.kv_cache_bytes) EXPECT_EQ(engine.stats().num_blocks, 12) << what;
    }
  }
}

// Each dp group generates prompts i with i % dp == dp_rank: the same
// responses as the whole set on one rank.
TEST_P(RolloutTp, DpSharesGiveTheSameResponses) {
  model::ParamStore full(config, 0, 1), part(config, grid.tp_rank, tp);
  full.init_random(test::tiny_init(32));
  part.init_random(test::tiny_init(32));
  const model::Qwen2Model m1(full, self), mt(part, grid.tp);
  const auto prompts = test_prompts(7);
  const SamplingOptions s = options(1.0);
  GenerationEngine one(m1, self, ops::Ctx{});
  const RolloutBatch all = one.generate(prompts, s);
  std::vector<PromptInput> mine;
  std::vector<int64_t> index;
  for (size_t i = 0; i < prompts.size(); ++i)
    if (int(i) % grid.dp_size == grid.dp_rank) mine.push_back(prompts[i]), index.push_back(int64_t(i));
  EngineOptions o;
  o.check_tp_agreement = true;
  GenerationEngine engine(mt, grid.tp, ops::Ctx{}, o);
  const RolloutBatch got = engine.generate(mine, s);
  ASSERT_EQ(got.num_prompts(), int64_t(mine.size()));
  for (size_t p = 0; p < mine.size(); ++p)
    for (int64_t k = 0; k < s.n; ++k)
      expect_response(got, int64_t(p) * s.n + k, all, index[p] * s.n + k, "dp share");
  // Every rank checked its share; all ranks together checked every prompt.
  EXPECT_EQ(world.all_reduce_i64(grid.tp_rank == 0 ? int64_t(mine.size()) : 0, parallel::ReduceOp::sum),
            int64_t(prompts.size()));
}

// rollout.exact_logprobs at tp <= 2: the engine's log-probs are the
// trainer's (forward_logprob, forward_train) bit for bit, with roomy and
// tight KV pools. At more tp ranks the model refuses the mode: MPI sums
// three or more partial sums in an order chosen by the message size.
TEST_P(RolloutTp, ExactLogprobsAreTheTrainers) {
  model::ParamStore part(config, grid.tp_rank, tp);
  part.init_random(test::tiny_init(33));
  model::ModelOptions mo;
  mo.batch_invariant = true;
  if (tp > 2) {
    EXPECT_THROW(model::Qwen2Model(part, grid.tp, mo), UserError);
    return;
  }
  const model::Qwen2Model mt(part, grid.tp, mo);
  const auto prompts = test_prompts(6);
  SamplingOptions s = options(0.7);
  s.top_p = 1.0;
  s.max_response_length = 12;
  EngineOptions roomy;
  roomy.check_tp_agreement = true;
  EngineOptions tight = roomy;
  tight.block_size = 2;
  tight.kv_cache_bytes = model::kv_cache_bytes(config, tp, 12, 2);
  tight.max_num_seqs = 3;
  tight.max_batch_tokens = 5;
  std::vector<float> first;
  for (const EngineOptions& o : {roomy, tight}) {
    GenerationEngine engine(mt, grid.tp, ops::Ctx{}, o);
    const RolloutBatch got = engine.generate(prompts, s);
    ASSERT_GT(got.total_response_tokens(), 30);
    const float inv_t = float(1.0 / s.temperature);
    EXPECT_EQ(test::trainer_logprobs(mt, got, inv_t, 4, false), got.sampling_logprobs) << "tp " << tp;
    EXPECT_EQ(test::trainer_logprobs(mt, got, inv_t, 7, true), got.sampling_logprobs) << "tp " << tp;
    if (first.empty()) first = got.sampling_logprobs;
    EXPECT_EQ(got.sampling_logprobs, first) << "tp " << tp << ": the pools gave other bits";
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, RolloutTp, testing::Values(1, 2, 0),
                         [](const testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("world") : "tp" + std::to_string(i.param);
                         });

}  // namespace
}  // namespace dapo
