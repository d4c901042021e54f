// `dapo sft`'s step across ranks (mpirun -np 2 and 4): on every tp x dp
// layout (dp = 2, tp = 2, and at 4 ranks dp = 4, tp = 2 x dp = 2, tp = 4)
// two SFT steps give the same loss, grad norm and weights as one rank that
// trains on the whole global batch - the token-mean over ALL dp ranks'
// response tokens and the dp gradient sum make the split invisible. The
// batch of 6 pairs splits unevenly over 4 dp ranks (1, 2, 1, 2 pairs), and
// micro-batches are cut by a small token budget.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "dapo/parallel/grid.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/sft_step.h"
#include "model/model_test_util.h"
#include "mpi/mpi_test_util.h"

namespace dapo {
namespace {

std::vector<trainer::SftExample> pairs(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<trainer::SftExample> out(static_cast<size_t>(n));
  for (trainer::SftExample& ex : out) {
    const size_t P = 2 + gen() % 5, R = 1 + gen() % 7;
    for (size_t i = 0; i < P; ++i) ex.prompt_ids.push_back(int32_t(gen() % uint32_t(vocab)));
    for (size_t i = 0; i < R; ++i) ex.response_ids.push_back(int32_t(gen() % uint32_t(vocab)));
  }
  return out;
}

Config config_of() {
  Config c;
  c.train.train_batch_size = 6;
  c.train.max_token_len_per_gpu = 14;
  c.train.total_steps = 2;
  c.optim.lr = 2e-2;
  c.optim.warmup_steps = 0;
  c.optim.weight_decay = 0.1;
  c.optim.grad_clip = 0.5;
  // eps above the gradients' rounding noise keeps the update a smooth
  // function of the gradient, so layouts summing in another order agree.
  c.optim.eps = 1e-3;
  c.data.seed = 3;
  return c;
}

TEST(SftDp, StepsEqualOneRankOnTheWholeBatch) {
  const parallel::Comm world = parallel::Comm::world();
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  const std::vector<trainer::SftExample> data = pairs(10, mc.vocab_size, 8);
  const Config config = config_of();

  // The reference, on every rank alone.
  const parallel::Comm self = world.split(world.rank(), 0);
  const parallel::Grid one = parallel::make_grid(self, 1);
  model::ParamStore full(mc, 0, 1);
  full.init_random(test::tiny_init(5));
  trainer::SftTrainer ref(full, one, config, data);
  std::vector<trainer::SftStepResult> want;
  for (int s = 0; s < 2; ++s) want.push_back(ref.step());
  ASSERT_LT(want[0].report.clip_coef, 1.0) << "the test should clip";

  for (int tp : test::tp_choices(world.size())) {
    const parallel::Grid grid = parallel::make_grid(world, tp);
    SCOPED_TRACE("tp " + std::to_string(tp) + " dp " + std::to_string(grid.dp_size));
    model::ParamStore part(mc, grid.tp_rank, tp);
    part.init_random(test::tiny_init(5));
    trainer::SftTrainer t(part, grid, config, data);
    for (int s = 0; s < 2; ++s) {
      const trainer::SftStepResult got = t.step();
      EXPECT_EQ(got.response_tokens, want[size_t(s)].response_tokens);
      EXPECT_EQ(got.tokens, want[size_t(s)].tokens);
      EXPECT_NEAR(got.loss, want[size_t(s)].loss, 1e-6 * want[size_t(s)].loss);
      EXPECT_NEAR(got.report.grad_norm, want[size_t(s)].report.grad_norm, 1e-5 * want[size_t(s)].report.grad_norm);
    }
    for (const model::ParamEntry& e : part.entries()) {
      const std::vector<float> whole = test::host_copy(full.param(e.spec.name));
      std::vector<float> expect(size_t(e.param.numel()));
      model::extract_slice(e.slice, e.spec.shape, whole.data(), expect.data());
      const std::vector<float> got = test::host_copy(e.param);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], expect[i], 1e-5) << e.spec.name << " element " << i;
    }
  }
}

}  // namespace
}  // namespace dapo
