// The model against HF transformers (tests/fixtures/model, made by
// make_fixture.py there): three small random Qwen2 models (tied and untied
// embeddings, head dims 16, 8 and 64) and three Qwen3 ones (q/k norms, head
// dims 32, 16 and 128 apart from hidden / heads, one with q/k/v biases and
// tied embeddings) loaded from their config.json + model.safetensors give HF's
// logits, log-probs, entropies and parameter gradients on a packed batch to
// fp32 tolerance, and HF's greedy continuations token for token (through
// the KV-cache forward). Skips when the fixtures are absent.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "dapo/io/safetensors.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"
#include "model/fixture_util.h"
#include "model/model_test_util.h"

namespace dapo::model {
namespace {

std::string fixture_dir(const std::string& name) {
  return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/model/" + name;
}

using test::read_f32;
using test::read_i32;

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// fp32 agreement: relative 1e-4 of each value, with a floor of 1e-5 of
// the tensor's largest magnitude for values near zero.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double floor = 1e-5 * max_abs(want);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * std::fabs(want[i]) + floor) << what << " element " << i;
}

class HfFixture : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir = fixture_dir(GetParam());
    if (!std::filesystem::exists(dir + "/expected.safetensors"))
      GTEST_SKIP() << dir << " is absent: run tests/fixtures/model/make_fixture.py (needs torch + transformers)";
    config = load_qwen2_config(dir + "/config.json");
    store = std::make_unique<ParamStore>(config, 0, 1);
    const io::SafetensorsFile weights(dir + "/model.safetensors");
    // Every tensor HF saved is one of the model's: none is left unused.
    for (const std::string& name : weights.names())
      EXPECT_TRUE(store->contains(name)) << name << " of " << dir << " is not a parameter of the model";
    for (const ParamEntry& e : store->entries()) {
      ASSERT_TRUE(weights.contains(e.spec.name)) << e.spec.name;
      EXPECT_EQ(weights.info(e.spec.name).shape, e.spec.shape) << e.spec.name;
      const std::vector<float> v = read_f32(weights, e.spec.name);
      store->load_full(e.spec.name, v.data(), int64_t(v.size()));
    }
  }

  std::string dir;
  Qwen2Config config;
  std::unique_ptr<ParamStore> store;
  parallel::Comm tp = parallel::Comm::world();
};

TEST_P(HfFixture, LogitsLogprobsEntropiesAndGradients) {
  const io::SafetensorsFile expected(dir + "/expected.safetensors");
  test::HostBatch batch;
  batch.tokens = read_i32(expected, "tokens");
  batch.positions = read_i32(expected, "positions");
  batch.cu_seqlens = read_i32(expected, "cu_seqlens");
  batch.targets = read_i32(expected, "targets");
  ASSERT_EQ(batch.B(), 3);
  const int64_t T = batch.T(), V = config.vocab_size;
  const std::vector<float> w = read_f32(expected, "w"), u = read_f32(expected, "u");
  for (bool recompute : {false, true}) {
    store->zero_grad();
    Qwen2Model m(*store, tp, ModelOptions{recompute});
    test::Workspace ws;
    std::vector<float> logits = test::zeros(T * V);
    m.forward_logits(ws.ctx, ws.act, batch.view(), tensor_f32(logits.data(), {T, V}));
    expect_close(logits, read_f32(expected, "logits"), "logits");
    std::vector<float> lp, ent;
    test::train_step(m, ws, batch, w, u, lp, ent);
    expect_close(lp, read_f32(expected, "logprob"), "logprob");
    expect_close(ent, read_f32(expected, "entropy"), "entropy");
    for (const ParamEntry& e : store->entries())
      expect_close(test::host_copy(e.grad), read_f32(expected, "grad." + e.spec.name), "grad." + e.spec.name);
  }
}

TEST_P(HfFixture, GreedyContinuationsMatchTokenForToken) {
  std::ifstream in(dir + "/expected.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const int64_t new_tokens = j.at("new_tokens").get<int64_t>();
  const int64_t V = config.vocab_size;
  const Qwen2Model m(*store, tp);
  Arena kv(size_t(4) << 20, Device::cpu, "kv");
  const KvCache cache = allocate_kv_cache(kv, config, 1, 64, 4);
  test::BlockPool pool(64, 4, 9);
  test::Workspace ws;
  const auto prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  const auto want = j.at("continuations").get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(prompts.size(), want.size());
  // All prompts advance together, as the rollout engine will run them.
  const size_t B = prompts.size();
  std::vector<std::vector<int32_t>> tables(B), next = prompts, got(B);
  std::vector<int64_t> cached(B, 0);
  for (int64_t s = 0; s < new_tokens; ++s) {
    for (size_t b = 0; b < B; ++b) pool.reserve(tables[b], cached[b] + int64_t(next[b].size()));
    test::HostCachedStep step(next, cached, tables, pool);
    std::vector<float> logits = test::zeros(int64_t(B) * V);
    m.forward_cached(ws.ctx, ws.act, cache, step.view(), tensor_f32(logits.data(), {int64_t(B), V}));
    for (size_t b = 0; b < B; ++b) {
      cached[b] += int64_t(next[b].size());
      const float* row = logits.data() + b * size_t(V);
      const int32_t token = int32_t(std::max_element(row, row + V) - row);  // ties: lowest id, as torch.argmax
      got[b].push_back(token);
      next[b] = {token};
    }
  }
  for (size_t b = 0; b < B; ++b) EXPECT_EQ(got[b], want[b]) << "prompt " << b;
}

INSTANTIATE_TEST_SUITE_P(Models, HfFixture,
                         testing::Values("tiny_untied", "tiny_tied", "small_d64", "qwen3_untied", "qwen3_tied_bias",
                                         "qwen3_d128"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace dapo::model
