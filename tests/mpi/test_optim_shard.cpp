// The optimizer sharded over dp (ZeRO-1) on the CPU backend (mpirun -np 2
// and 4; layouts tp 1 x dp 2, tp 2 x dp 1; tp 1 x dp 4, tp 2 x dp 2,
// tp 4 x dp 1):
//  - steps with sharding equal steps without, on the same per-rank
//    gradients: bit for bit when the step does not clip (the gradients are
//    exact in fp32, so any summation order gives the same sums, and the
//    update of each element is the same code), to fp32 rounding of the
//    clip factor when it does (the norm's float partial sums follow the
//    shards); the grad norm to 1e-6 relative, the same on every rank;
//    a non-finite gradient on one rank skips the step everywhere;
//  - training checkpoints saved sharded load into every layout, sharded or
//    not, and unsharded ones into sharded optimizers: every tensor exact;
//  - a restart is exact: 2 steps, save, a new store and optimizer (other
//    buckets) that resume, 2 steps equal 4 steps bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "dapo/core/error.h"
#include "dapo/optim/adamw.h"
#include "dapo/optim/shard_layout.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/checkpointing.h"
#include "io/io_test_util.h"
#include "model/model_test_util.h"
#include "mpi/mpi_test_util.h"

namespace dapo {
namespace {

using model::ParamEntry;
using model::ParamStore;
using optim::AdamW;
using parallel::Comm;
using parallel::Grid;

// Small buckets: many of them, so shards are unions of many parts.
constexpr size_t kBucketBytes = 4096;

optim::AdamWOptions options(bool clip) {
  optim::AdamWOptions o;
  o.weight_decay = 0.1;
  o.eps = 1e-3;
  o.grad_clip = clip ? 1e-2 : 0;
  return o;
}

// Gradient element i of tensor `name` on dp rank r at step s: a multiple of
// 2^-10 in [-1/16, 1/16], so sums over ranks are exact in fp32.
float grad_value(const std::string& name, int64_t i, int r, int s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  h ^= uint32_t(i) * 2654435761u + uint32_t(r) * 40503u + uint32_t(s) * 977u;
  h = (h ^ (h >> 15)) * 2246822519u;
  h ^= h >> 13;
  return float(int(h % 129) - 64) / 1024.0f;
}

// This rank's tp slice of the full gradients of dp rank `r` at step `s`.
void fill_grads(ParamStore& params, int r, int s) {
  params.zero_grad();
  for (const ParamEntry& e : params.entries()) {
    int64_t n = 1;
    for (int64_t d : e.spec.shape) n *= d;
    std::vector<float> full(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) full[size_t(i)] = grad_value(e.spec.name, i, r, s);
    model::extract_slice(e.slice, e.spec.shape, full.data(), e.grad.ptr<float>());
  }
}

std::vector<float> weights(const ParamStore& p) { return test::host_copy(p.parameters()); }

// Every tensor's moments, this rank's tp slices (collective when sharded).
std::vector<float> moments(const AdamW& opt, const ParamStore& params) {
  std::vector<float> out;
  for (const ParamEntry& e : params.entries()) {
    std::vector<float> m(size_t(e.param.numel())), v(m.size());
    opt.read_local(e.spec.name, m.data(), v.data(), e.param.numel());
    out.insert(out.end(), m.begin(), m.end());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

class OptimShard : public testing::TestWithParam<bool> {};  // clip or not

TEST_P(OptimShard, StepsEqualUnshardedSteps) {
  const bool clip = GetParam();
  const Comm world = Comm::world();
  const model::Qwen2Config config = test::tiny_config(false, 2);
  const double lrs[] = {1e-2, 2e-2, 5e-3};
  for (int tp : test::tp_choices(world.size())) {
    const Grid grid = parallel::make_grid(world, tp);
    SCOPED_TRACE("tp " + std::to_string(tp) + " x dp " + std::to_string(grid.dp_size));
    ParamStore plain_store(config, grid.tp_rank, tp), zero_store(config, grid.tp_rank, tp);
    plain_store.init_random(test::tiny_init(3));
    zero_store.init_random(test::tiny_init(3));
    AdamW plain(plain_store, options(clip));
    AdamW zero(zero_store, options(clip), optim::ShardOptions{&grid.dp, kBucketBytes});
    EXPECT_EQ(zero.sharded(), grid.dp_size > 1);
    if (zero.sharded()) {
      EXPECT_GT(zero.layout().buckets().size(), size_t(4));
      EXPECT_EQ(zero.exp_avg().numel(), zero.layout().shard_elements());
      EXPECT_LT(zero.exp_avg().numel(), zero_store.buffer_elements() / grid.dp_size + 64 * grid.dp_size);
    }
    for (int s = 0; s < 3; ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      fill_grads(plain_store, grid.dp_rank, s);
      fill_grads(zero_store, grid.dp_rank, s);
      const optim::StepReport want = plain.step(ops::Ctx{}, {&grid.dp, &grid.tp}, lrs[s]);
      const optim::StepReport got = zero.step(ops::Ctx{}, {&grid.dp, &grid.tp}, lrs[s]);
      ASSERT_FALSE(got.skipped);
      EXPECT_EQ(got.steps_taken, s + 1);
      EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-6 * want.grad_norm);
      EXPECT_EQ(world.all_reduce_f64(got.grad_norm, parallel::ReduceOp::max),
                world.all_reduce_f64(got.grad_norm, parallel::ReduceOp::min));
      if (clip) ASSERT_LT(want.clip_coef, 1.0) << "the test should clip";
      const std::vector<float> a = weights(plain_store), b = weights(zero_store);
      if (!clip) {
        ASSERT_EQ(b, a) << "sharded weights differ from unsharded ones";
        ASSERT_EQ(moments(zero, zero_store), moments(plain, plain_store));
      } else {
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], 1e-6 + 1e-6 * std::fabs(a[i])) << "element " << i;
        const std::vector<float> ma = moments(plain, plain_store), mb = moments(zero, zero_store);
        for (size_t i = 0; i < ma.size(); ++i)
          ASSERT_NEAR(mb[i], ma[i], 1e-9 + 1e-5 * std::fabs(ma[i])) << "moment element " << i;
      }
    }
    // A non-finite gradient on one rank: every rank skips, nothing moves.
    fill_grads(zero_store, grid.dp_rank, 3);
    if (world.rank() == world.size() - 1)
      zero_store.entries().back().grad.ptr<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> before = weights(zero_store);
    const optim::StepReport skipped = zero.step(ops::Ctx{}, {&grid.dp, &grid.tp}, 1e-2);
    EXPECT_TRUE(skipped.skipped);
    EXPECT_EQ(skipped.steps_taken, 3);
    EXPECT_EQ(weights(zero_store), before);
  }
}

INSTANTIATE_TEST_SUITE_P(Clip, OptimShard, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) { return info.param ? "clip" : "no_clip"; });

// Full tensors: weights, and moments derived from them.
struct Full {
  std::map<std::string, std::vector<float>> w, m, v;
  explicit Full(const model::Qwen2Config& mc) {
    for (const model::ParamSpec& spec : model::qwen2_param_specs(mc)) {
      w[spec.name] = test::full_tensor(spec, true);
      for (const float x : w[spec.name]) {
        m[spec.name].push_back(x * 0.125f);
        v[spec.name].push_back(std::abs(x) + 1.0f);
      }
    }
  }
};

TEST(OptimShardCheckpoint, EveryLayoutShardedOrNotLoadsEveryOther) {
  const Comm world = Comm::world();
  const test::SharedDir dir(world);
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  const Full full(mc);
  for (const bool save_sharded : {true, false}) {
    for (const int save_tp : test::tp_choices(world.size())) {
      const Grid g = parallel::make_grid(world, save_tp);
      Config c;
      c.checkpoint.dir = dir.file(std::string(save_sharded ? "z" : "p") + std::to_string(save_tp));
      c.train.seed = 77;
      ParamStore params(mc, g.tp_rank, g.tp_size);
      AdamW opt(params, optim::AdamWOptions{}, optim::ShardOptions{save_sharded ? &g.dp : nullptr, kBucketBytes});
      for (const ParamEntry& e : params.entries()) {
        const std::vector<float> w = test::slice_of(e.spec, e.slice, full.w.at(e.spec.name));
        const std::vector<float> m = test::slice_of(e.spec, e.slice, full.m.at(e.spec.name));
        const std::vector<float> v = test::slice_of(e.spec, e.slice, full.v.at(e.spec.name));
        std::copy(w.begin(), w.end(), e.param.ptr<float>());
        opt.load_local(e.spec.name, m.data(), v.data(), int64_t(m.size()));
      }
      opt.set_steps_taken(12);
      data::PromptOrder order(50, 3);
      order.next_batch(70);
      const std::string path = trainer::save_training_state(c, g, params, opt, order, 6);

      for (const int load_tp : test::tp_choices(world.size())) {
        for (const bool load_sharded : {true, false}) {
          SCOPED_TRACE(cat("saved ", save_sharded ? "sharded" : "unsharded", " with tp ", save_tp, ", loaded ",
                           load_sharded ? "sharded" : "unsharded", " with tp ", load_tp));
          const Grid h = parallel::make_grid(world, load_tp);
          Config r = c;
          r.checkpoint.resume = path;
          ParamStore back(mc, h.tp_rank, h.tp_size);
          // Other buckets than the writer's: the partition is not in the file.
          AdamW back_opt(back, optim::AdamWOptions{},
                         optim::ShardOptions{load_sharded ? &h.dp : nullptr, 3 * kBucketBytes});
          const std::optional<trainer::ResumePoint> p = trainer::resume_training(r, h, back, back_opt);
          ASSERT_TRUE(p.has_value());
          EXPECT_EQ(p->step, 6);
          EXPECT_EQ(back_opt.steps_taken(), 12);
          for (const ParamEntry& e : back.entries()) {
            const int64_t n = e.param.numel();
            const std::vector<float> w(e.param.ptr<float>(), e.param.ptr<float>() + n);
            std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
            back_opt.read_local(e.spec.name, m.data(), v.data(), n);  // a gather when sharded
            ASSERT_EQ(w, test::slice_of(e.spec, e.slice, full.w.at(e.spec.name))) << e.spec.name;
            ASSERT_EQ(m, test::slice_of(e.spec, e.slice, full.m.at(e.spec.name))) << e.spec.name;
            ASSERT_EQ(v, test::slice_of(e.spec, e.slice, full.v.at(e.spec.name))) << e.spec.name;
          }
        }
      }
    }
  }
}

TEST(OptimShardCheckpoint, RestartIsExact) {
  const Comm world = Comm::world();
  const test::SharedDir dir(world);
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  const double lrs[] = {1e-2, 2e-2, 5e-3, 1e-2};
  for (const int tp : test::tp_choices(world.size())) {
    const Grid g = parallel::make_grid(world, tp);
    if (g.dp_size == 1) continue;
    SCOPED_TRACE("tp " + std::to_string(tp) + " x dp " + std::to_string(g.dp_size));
    ParamStore straight(mc, g.tp_rank, tp);
    straight.init_random(test::tiny_init(3));
    AdamW straight_opt(straight, options(true), optim::ShardOptions{&g.dp, kBucketBytes});
    for (int s = 0; s < 4; ++s) {
      fill_grads(straight, g.dp_rank, s);
      ASSERT_LT(straight_opt.step(ops::Ctx{}, {&g.dp, &g.tp}, lrs[s]).clip_coef, 1.0) << "the test should clip";
    }

    Config c;
    c.checkpoint.dir = dir.file("restart" + std::to_string(tp));
    c.train.seed = 5;
    const data::PromptOrder order(50, 3);
    std::string path;
    {
      ParamStore first(mc, g.tp_rank, tp);
      first.init_random(test::tiny_init(3));
      AdamW first_opt(first, options(true), optim::ShardOptions{&g.dp, kBucketBytes});
      for (int s = 0; s < 2; ++s) {
        fill_grads(first, g.dp_rank, s);
        first_opt.step(ops::Ctx{}, {&g.dp, &g.tp}, lrs[s]);
      }
      path = trainer::save_training_state(c, g, first, first_opt, order, 2);
    }
    ParamStore second(mc, g.tp_rank, tp);
    second.init_random(test::tiny_init(4));  // other weights: the checkpoint must replace them all
    AdamW second_opt(second, options(true), optim::ShardOptions{&g.dp, kBucketBytes});
    Config r = c;
    r.checkpoint.resume = path;
    ASSERT_TRUE(trainer::resume_training(r, g, second, second_opt).has_value());
    for (int s = 2; s < 4; ++s) {
      fill_grads(second, g.dp_rank, s);
      second_opt.step(ops::Ctx{}, {&g.dp, &g.tp}, lrs[s]);
    }
    EXPECT_EQ(weights(second), weights(straight));
    EXPECT_EQ(moments(second_opt, second), moments(straight_opt, straight));
    EXPECT_EQ(second_opt.steps_taken(), straight_opt.steps_taken());
  }
}

}  // namespace
}  // namespace dapo
