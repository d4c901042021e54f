// The DAPO update phase across ranks (mpirun -np 2 and 4): on every tp x dp
// layout, two epochs over two mini-batches - the kept groups dealt
// unevenly over the dp ranks, micro-batches cut by a small token budget -
// give the same loss metrics, grad norms and weights as one rank updating on
// all groups at once, for token-mean and for seq-mean-token-mean with the KL
// term to a reference model. The global normaliser (tokens / sequences
// all-reduced over dp) and the dp gradient sum make the split invisible.
#include <gtest/gtest.h>

#include <cmath>

#include "mpi/mpi_test_util.h"
#include "trainer/dapo_test_util.h"

namespace dapo {
namespace {

trainer::UpdatePhaseContext context(test::Policy& p, LossAggMode agg, double kl, int64_t budget) {
  trainer::UpdatePhaseContext c;
  c.actor = p.actor.get();
  c.reference = p.reference.get();
  c.loss.agg = agg;
  c.loss.kl_coef = kl;
  c.inv_temperature = float(1.0 / 0.9);
  c.ppo_epochs = 2;
  c.max_token_len = budget;
  return c;
}

optim::AdamWOptions adam() {
  optim::AdamWOptions o;
  o.grad_clip = 0.5;
  o.eps = 1e-3;  // above the gradients' rounding noise: layouts summing in another order agree
  return o;
}

TEST(DapoUpdateDp, LayoutsEqualOneRankOnAllGroups) {
  const parallel::Comm world = parallel::Comm::world();
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  const parallel::Comm self = world.split(world.rank(), 0);
  const parallel::Grid one = parallel::make_grid(self, 1);
  constexpr int kGroups = 8;
  constexpr int64_t kPerMiniBatch = 4;

  struct Variant {
    LossAggMode agg;
    double kl;
  };
  for (const Variant v : {Variant{LossAggMode::token_mean, 0}, Variant{LossAggMode::seq_mean_token_mean, 0.2}}) {
    SCOPED_TRACE(to_string(v.agg));
    // The reference, on every rank alone.
    test::Policy full(mc, one, adam(), v.kl > 0);
    std::vector<rl::GroupData> all = test::random_groups(kGroups, 3, mc.vocab_size, 21);
    std::vector<int64_t> all_mb;
    for (int i = 0; i < kGroups; ++i) all_mb.push_back(i / kPerMiniBatch);
    const trainer::UpdatePhaseResult want =
        trainer::run_update_phase(context(full, v.agg, v.kl, 4096), one, all, all_mb, 2, 0.05);
    ASSERT_GT(want.loss.clipped, 0) << "the second epoch should clip";

    for (int tp : test::tp_choices(world.size())) {
      const parallel::Grid grid = parallel::make_grid(world, tp);
      SCOPED_TRACE("tp " + std::to_string(tp) + " dp " + std::to_string(grid.dp_size));
      test::Policy part(mc, grid, adam(), v.kl > 0);
      // Group i goes to dp rank (i * i) % dp: uneven shares, some ranks
      // without a group in a mini-batch at dp = 4.
      std::vector<rl::GroupData> mine;
      std::vector<int64_t> mine_mb;
      const std::vector<rl::GroupData> groups = test::random_groups(kGroups, 3, mc.vocab_size, 21);
      for (int i = 0; i < kGroups; ++i) {
        if ((i * i) % grid.dp_size != grid.dp_rank) continue;
        mine.push_back(groups[size_t(i)]);
        mine_mb.push_back(i / kPerMiniBatch);
      }
      const trainer::UpdatePhaseResult got =
          trainer::run_update_phase(context(part, v.agg, v.kl, 16), grid, mine, mine_mb, 2, 0.05);
      EXPECT_EQ(got.optimizer_steps, want.optimizer_steps);
      EXPECT_EQ(got.loss.tokens, want.loss.tokens);
      EXPECT_EQ(got.loss.clipped, want.loss.clipped);
      EXPECT_NEAR(got.loss.pg_loss, want.loss.pg_loss, 1e-5 * std::abs(want.loss.pg_loss));
      EXPECT_NEAR(got.loss.kl_loss, want.loss.kl_loss, 1e-5 * want.loss.kl_loss + 1e-9);
      EXPECT_NEAR(got.loss.entropy_sum, want.loss.entropy_sum, 1e-6 * want.loss.entropy_sum);
      EXPECT_NEAR(got.grad_norm_mean, want.grad_norm_mean, 1e-5 * want.grad_norm_mean);
      for (const model::ParamEntry& e : part.params->entries()) {
        const std::vector<float> whole = test::host_copy(full.params->param(e.spec.name));
        std::vector<float> expect(size_t(e.param.numel()));
        model::extract_slice(e.slice, e.spec.shape, whole.data(), expect.data());
        const std::vector<float> w = test::host_copy(e.param);
        for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(w[i], expect[i], 1e-5) << e.spec.name << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace dapo
