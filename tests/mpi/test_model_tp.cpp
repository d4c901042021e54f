// The Qwen2 and Qwen3 models under tensor and data parallelism (mpirun -np 2 and 4):
// with tp = 2 and tp = 4 (Hkv = 2, so tp = 4 replicates KV heads) the
// log-probs, entropies, full logits and cached-generation logits equal
// those of tp = 1 computed by each rank alone on a one-rank Comm, and each
// rank's gradient slices equal the matching slices of the tp = 1
// gradients; with dp, an all-reduce of the gradient buffer gives the sum of
// the ranks' gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/grid.h"
#include "model/model_test_util.h"

namespace dapo {
namespace {

using model::ModelOptions;
using model::ParamEntry;
using model::ParamStore;
using model::Qwen2Config;
using model::Qwen2Model;
using parallel::Comm;
using test::HostBatch;

const std::vector<int64_t> kLengths{6, 3, 8};

// A Comm of this rank alone: the tp = 1 reference.
Comm self_comm(const Comm& world) { return world.split(world.rank(), 0); }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Every entry of `part` (tp slices) against the same slice of `full`'s
// gradient (tp = 1).
void expect_grad_slices(const ParamStore& part, const ParamStore& full, const std::string& what) {
  const double scale = max_abs(test::host_copy(full.gradients()));
  ASSERT_GT(scale, 0.0);
  for (const ParamEntry& e : part.entries()) {
    const std::vector<float> whole = test::host_copy(full.grad(e.spec.name));
    std::vector<float> want(size_t(e.grad.numel()));
    model::extract_slice(e.slice, e.spec.shape, whole.data(), want.data());
    const std::vector<float> got = test::host_copy(e.grad);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 2e-6 * scale)
          << what << " " << e.spec.name << " local element " << i;
  }
}

struct TpCase {
  int tp;          // 0: the whole world
  bool tied;
  bool recompute;
  bool qwen3 = false;  // Qwen3 (q/k norms, head dim 12); tied: with q/k/v/o biases
};

class ModelTp : public testing::TestWithParam<TpCase> {
 protected:
  void SetUp() override {
    world = Comm::world();
    tp = GetParam().tp == 0 ? world.size() : GetParam().tp;
    if (world.size() % tp != 0) GTEST_SKIP() << "tp " << tp << " does not divide " << world.size();
    grid = parallel::make_grid(world, tp);
    self = self_comm(world);
    config = GetParam().qwen3 ? test::tiny_qwen3_config(GetParam().tied, 2, GetParam().tied)
                              : test::tiny_config(GetParam().tied, 2, GetParam().tied ? 1e6 : 1e4);
  }

  Comm world, self;
  parallel::Grid grid;
  int tp = 1;
  Qwen2Config config;
};

TEST_P(ModelTp, TrainingMatchesTpOne) {
  const ModelOptions opt{GetParam().recompute};
  ParamStore full(config, 0, 1), part(config, grid.tp_rank, tp);
  full.init_random(test::tiny_init(9));
  part.init_random(test::tiny_init(9));
  Qwen2Model m1(full, self, opt), mt(part, grid.tp, opt);
  // The same batch on the ranks of one tp group; another one per dp group.
  HostBatch batch(kLengths, config.vocab_size, 100 + uint32_t(grid.dp_rank));
  const std::vector<float> w = test::uniform_vector(size_t(batch.T()), 7),
                           u = test::uniform_vector(size_t(batch.T()), 8);
  test::Workspace ws1, wst;
  std::vector<float> lp1, ent1, lpt, entt;
  test::train_step(m1, ws1, batch, w, u, lp1, ent1, 1.25f);
  test::train_step(mt, wst, batch, w, u, lpt, entt, 1.25f);
  for (size_t t = 0; t < lp1.size(); ++t) {
    EXPECT_NEAR(lpt[t], lp1[t], 1e-5) << "token " << t;
    EXPECT_NEAR(entt[t], ent1[t], 1e-5) << "token " << t;
  }
  expect_grad_slices(part, full, "tp " + std::to_string(tp));
  // A second micro-batch accumulates on both (the gradients of weights that
  // are summed over tp, Qwen3's q/k norms, included).
  HostBatch second({5, 7}, config.vocab_size, 200 + uint32_t(grid.dp_rank));
  const std::vector<float> w2 = test::uniform_vector(size_t(second.T()), 9),
                           u2 = test::uniform_vector(size_t(second.T()), 10);
  std::vector<float> lp1b, ent1b, lptb, enttb;
  test::train_step(m1, ws1, second, w2, u2, lp1b, ent1b, 1.25f);
  test::train_step(mt, wst, second, w2, u2, lptb, enttb, 1.25f);
  expect_grad_slices(part, full, "tp " + std::to_string(tp) + ", two micro-batches");

  // Full logits, gathered over tp.
  const int64_t T = batch.T(), V = config.vocab_size;
  std::vector<float> l1 = test::zeros(T * V), lt = test::zeros(T * V);
  m1.forward_logits(ws1.ctx, ws1.act, batch.view(), tensor_f32(l1.data(), {T, V}));
  mt.forward_logits(wst.ctx, wst.act, batch.view(), tensor_f32(lt.data(), {T, V}));
  for (size_t i = 0; i < l1.size(); ++i) ASSERT_NEAR(lt[i], l1[i], 1e-5 + 1e-5 * std::fabs(l1[i])) << i;

  // Scoring without gradients agrees with the training forward bit for bit.
  std::vector<float> lps = test::zeros(T), ents = test::zeros(T);
  mt.forward_logprob(wst.ctx, wst.act, batch.view(), 1.25f, tensor_f32(lps.data(), {T}),
                     tensor_f32(ents.data(), {T}));
  EXPECT_EQ(lps, lpt);
  EXPECT_EQ(ents, entt);
}

TEST_P(ModelTp, CachedGenerationMatchesTpOne) {
  ParamStore full(config, 0, 1), part(config, grid.tp_rank, tp);
  full.init_random(test::tiny_init(10));
  part.init_random(test::tiny_init(10));
  const Qwen2Model m1(full, self), mt(part, grid.tp);
  Arena kv1(size_t(1) << 20, Device::cpu, "kv1"), kvt(size_t(1) << 20, Device::cpu, "kvt");
  const model::KvCache c1 = model::allocate_kv_cache(kv1, config, 1, 16, 4);
  const model::KvCache ct = model::allocate_kv_cache(kvt, config, tp, 16, 4);
  ASSERT_EQ(ct.k[0].shape[2], std::max<int64_t>(1, 2 / tp));  // local KV heads
  test::BlockPool pool(16, 4, 2);
  HostBatch prompts({5, 7}, config.vocab_size, 200);
  std::vector<std::vector<int32_t>> seqs{{prompts.tokens.begin(), prompts.tokens.begin() + 5},
                                         {prompts.tokens.begin() + 5, prompts.tokens.end()}};
  std::vector<std::vector<int32_t>> tables(2);
  std::vector<std::vector<int32_t>> next = seqs;
  std::vector<int64_t> cached{0, 0};
  test::Workspace ws;
  const int64_t V = config.vocab_size;
  for (int s = 0; s < 4; ++s) {
    for (size_t b = 0; b < 2; ++b) pool.reserve(tables[b], cached[b] + int64_t(next[b].size()));
    test::HostCachedStep step(next, cached, tables, pool);
    std::vector<float> l1 = test::zeros(2 * V), lt = test::zeros(2 * V);
    m1.forward_cached(ws.ctx, ws.act, c1, step.view(), tensor_f32(l1.data(), {2, V}));
    mt.forward_cached(ws.ctx, ws.act, ct, step.view(), tensor_f32(lt.data(), {2, V}));
    for (size_t i = 0; i < l1.size(); ++i)
      ASSERT_NEAR(lt[i], l1[i], 1e-5 + 1e-5 * std::fabs(l1[i])) << "step " << s << " element " << i;
    for (size_t b = 0; b < 2; ++b) {
      cached[b] += int64_t(next[b].size());
      const float* row = l1.data() + b * size_t(V);
      next[b] = {int32_t(std::max_element(row, row + V) - row)};
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Model, ModelTp,
                         testing::Values(TpCase{2, false, false}, TpCase{2, true, true}, TpCase{0, false, true},
                                         TpCase{0, true, false}, TpCase{2, false, false, true},
                                         TpCase{0, false, true, true}, TpCase{0, true, false, true}),
                         [](const testing::TestParamInfo<TpCase>& i) {
                           return std::string(i.param.qwen3 ? "qwen3_" : "") + (i.param.tp == 0 ? "tpWorld" : "tp2") +
                                  (i.param.tied ? "_tied" : "_untied") + (i.param.recompute ? "_recompute" : "");
                         });

// dp: ranks with different data, one all-reduce of the whole gradient
// buffer, against the sum of every rank's gradients computed on this rank.
// On 4 ranks also tp = 2 x dp = 2.
TEST(ModelDp, GradientAllReduceSumsTheRanksGradients) {
  const Comm world = Comm::world();
  const Comm self = self_comm(world);
  for (int tp : {1, 2}) {
    if (world.size() % tp != 0 || world.size() / tp < 2) continue;
    const parallel::Grid grid = parallel::make_grid(world, tp);
    const Qwen2Config config = test::tiny_config(tp == 2);
    ParamStore part(config, grid.tp_rank, tp), sum(config, 0, 1);
    part.init_random(test::tiny_init(11));
    sum.init_random(test::tiny_init(11));
    Qwen2Model mt(part, grid.tp), m1(sum, self);
    test::Workspace ws;
    std::vector<float> lp, ent;
    auto data = [&](int dp_rank) { return HostBatch({4 + dp_rank, 5, 3}, config.vocab_size, 300 + uint32_t(dp_rank)); };
    HostBatch mine = data(grid.dp_rank);
    test::train_step(mt, ws, mine, test::uniform_vector(size_t(mine.T()), 1), test::uniform_vector(size_t(mine.T()), 2),
                     lp, ent);
    grid.dp.all_reduce(part.gradients(), parallel::ReduceOp::sum);
    for (int r = 0; r < grid.dp_size; ++r) {
      HostBatch b = data(r);
      test::train_step(m1, ws, b, test::uniform_vector(size_t(b.T()), 1), test::uniform_vector(size_t(b.T()), 2), lp,
                       ent);
    }
    expect_grad_slices(part, sum, "dp " + std::to_string(grid.dp_size) + " x tp " + std::to_string(tp));
  }
}

}  // namespace
}  // namespace dapo
