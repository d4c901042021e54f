// Training checkpoints across layouts (mpirun -np 2 and 4): saved from
// every tp x dp grid the world allows and resumed with every other, each
// rank gets exactly its tp slice of the weights and of both Adam moments,
// the optimizer step count and the prompt order - and the per-tensor
// digests verify whatever the split (resharding is loading).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "dapo/trainer/checkpointing.h"
#include "io/io_test_util.h"
#include "model/model_test_util.h"
#include "mpi/mpi_test_util.h"

namespace dapo::trainer {
namespace {

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

// This rank's slices of `full` into params and optimizer.
void fill(const Full& full, model::ParamStore& params, optim::AdamW& opt) {
  for (const model::ParamEntry& e : params.entries()) {
    const std::vector<float> w = test::slice_of(e.spec, e.slice, full.w.at(e.spec.name));
    const std::vector<float> m = test::slice_of(e.spec, e.slice, full.m.at(e.spec.name));
    const std::vector<float> v = test::slice_of(e.spec, e.slice, full.v.at(e.spec.name));
    std::copy(w.begin(), w.end(), e.param.ptr<float>());
    opt.load_local(e.spec.name, m.data(), v.data(), int64_t(m.size()));
  }
}

TEST(ResumeMpi, SaveWithOneLayoutResumeWithAnother) {
  const parallel::Comm world = parallel::Comm::world();
  const test::SharedDir dir(world);
  const model::Qwen2Config mc = test::tiny_config(false, 2);
  const Full full(mc);
  for (const int save_tp : test::tp_choices(world.size())) {
    const parallel::Grid g = parallel::make_grid(world, save_tp);
    Config c;
    c.checkpoint.dir = dir.file("tp" + std::to_string(save_tp));
    c.train.seed = 77;
    model::ParamStore params(mc, g.tp_rank, g.tp_size);
    optim::AdamW opt(params, optim::AdamWOptions{});
    fill(full, params, opt);
    opt.set_steps_taken(12);
    data::PromptOrder order(50, 3);
    order.next_batch(70);  // into the second epoch
    const std::string path = save_training_state(c, g, params, opt, order, 6);

    for (const int load_tp : test::tp_choices(world.size())) {
      SCOPED_TRACE("saved with tp " + std::to_string(save_tp) + ", resumed with tp " + std::to_string(load_tp));
      const parallel::Grid h = parallel::make_grid(world, load_tp);
      Config r = c;
      r.checkpoint.resume = path;
      model::ParamStore back(mc, h.tp_rank, h.tp_size);
      optim::AdamW back_opt(back, optim::AdamWOptions{});
      const std::optional<ResumePoint> p = resume_training(r, h, back, back_opt);
      ASSERT_TRUE(p.has_value());
      EXPECT_EQ(p->step, 6);
      EXPECT_EQ(p->order, order.state());
      EXPECT_EQ(back_opt.steps_taken(), 12);
      for (const model::ParamEntry& e : back.entries()) {
        const int64_t n = e.param.numel();
        const std::vector<float> w(e.param.ptr<float>(), e.param.ptr<float>() + n);
        std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
        back_opt.read_local(e.spec.name, m.data(), v.data(), n);
        ASSERT_EQ(w, test::slice_of(e.spec, e.slice, full.w.at(e.spec.name))) << e.spec.name;
        ASSERT_EQ(m, test::slice_of(e.spec, e.slice, full.m.at(e.spec.name))) << e.spec.name;
        ASSERT_EQ(v, test::slice_of(e.spec, e.slice, full.v.at(e.spec.name))) << e.spec.name;
      }
    }
  }
}

}  // namespace
}  // namespace dapo::trainer
