// The generation forward over the paged KV cache: prefill then decode steps
// give the logits of the full forward of the whole sequence so far, with
// several sequences per step, chunked prefill mixed with decode, and a
// prompt's blocks shared by two samples (prefilled once).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"
#include "model/model_test_util.h"

namespace dapo::model {
namespace {

using test::BlockPool;
using test::HostCachedStep;

class CachedTest : public testing::TestWithParam<test::TinyArch> {
 protected:
  void SetUp() override {
    config = test::tiny_arch_config(GetParam());
    store = std::make_unique<ParamStore>(config, 0, 1);
    store->init_random(test::tiny_init(21));
    model = std::make_unique<Qwen2Model>(*store, tp);
    cache = allocate_kv_cache(kv_arena, config, 1, kBlocks, kBlockSize);
  }

  // The last row of the full forward of `seq`.
  std::vector<float> full_last_logits(const std::vector<int32_t>& seq) {
    test::HostBatch b;
    b.tokens = seq;
    for (size_t i = 0; i < seq.size(); ++i) b.positions.push_back(int32_t(i));
    b.cu_seqlens = {0, int32_t(seq.size())};
    b.targets.assign(seq.size(), 0);
    const int64_t T = b.T(), V = config.vocab_size;
    std::vector<float> logits = test::zeros(T * V);
    model->forward_logits(ws.ctx, ws.act, b.view(), tensor_f32(logits.data(), {T, V}));
    return std::vector<float>(logits.end() - V, logits.end());
  }

  // Runs one cached step; returns (B, V) logits. fresh_max_seqlen: see
  // CachedBatch (0: attention over the paged cache).
  std::vector<float> step(HostCachedStep& s, int64_t fresh_max_seqlen = 0) {
    const int64_t B = int64_t(s.last_rows.size()), V = config.vocab_size;
    std::vector<float> logits = test::zeros(B * V);
    Arena act(size_t(1) << 20, Device::cpu, "step");
    CachedBatch batch = s.view();
    batch.fresh_max_seqlen = fresh_max_seqlen;
    model->forward_cached(ws.ctx, act, cache, batch, tensor_f32(logits.data(), {B, V}));
    EXPECT_EQ(act.used(), 0u);
    EXPECT_LE(act.peak(), model->cached_activation_bytes(int64_t(s.tokens.size()), B));
    return logits;
  }

  // Prefills prompts of `lens` tokens in one step (fresh_max_seqlen as
  // step() takes it), then `decodes` greedy steps of one token per
  // sequence; every step's last-token logits against the full forward.
  void prefill_then_decode(std::vector<int64_t> lens, uint32_t seed, int64_t fresh_max_seqlen, int decodes) {
    BlockPool pool(kBlocks, kBlockSize, 3);
    test::HostBatch prompts(lens, config.vocab_size, seed);
    const size_t B = lens.size();
    std::vector<std::vector<int32_t>> seqs(B), tables(B);
    for (size_t b = 0; b < B; ++b)
      seqs[b].assign(prompts.tokens.begin() + prompts.cu_seqlens[b],
                     prompts.tokens.begin() + prompts.cu_seqlens[b + 1]);
    // Prefill all prompts in one step.
    for (size_t b = 0; b < B; ++b) pool.reserve(tables[b], int64_t(seqs[b].size()));
    HostCachedStep prefill(seqs, std::vector<int64_t>(B, 0), tables, pool);
    std::vector<float> logits = step(prefill, fresh_max_seqlen);
    const bool fresh = fresh_max_seqlen > 0;
    for (size_t b = 0; b < B; ++b)
      expect_row(logits, b, full_last_logits(seqs[b]), fresh ? "fresh prefill" : "prefill");
    // Greedy decode steps, one token per sequence each.
    for (int s = 0; s < decodes; ++s) {
      std::vector<std::vector<int32_t>> next(B);
      std::vector<int64_t> cached(B);
      for (size_t b = 0; b < B; ++b) {
        cached[b] = int64_t(seqs[b].size());
        next[b] = {argmax(logits, b, config.vocab_size)};
        seqs[b].push_back(next[b][0]);
        pool.reserve(tables[b], int64_t(seqs[b].size()));
      }
      HostCachedStep decode(next, cached, tables, pool);
      logits = step(decode);
      for (size_t b = 0; b < B; ++b)
        expect_row(logits, b, full_last_logits(seqs[b]), fresh ? "decode after a fresh prefill" : "decode");
    }
  }

  void expect_row(const std::vector<float>& logits, size_t row, const std::vector<float>& want, const char* what) {
    const size_t V = size_t(config.vocab_size);
    for (size_t v = 0; v < V; ++v)
      ASSERT_NEAR(logits[row * V + v], want[v], 2e-5 + 2e-5 * std::fabs(want[v]))
          << what << " row " << row << " id " << v;
  }

  static int32_t argmax(const std::vector<float>& logits, size_t row, int64_t V) {
    const float* r = logits.data() + row * size_t(V);
    return int32_t(std::max_element(r, r + V) - r);
  }

  static constexpr int64_t kBlocks = 40, kBlockSize = 4;
  parallel::Comm tp = parallel::Comm::world();
  Qwen2Config config;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<Qwen2Model> model;
  Arena kv_arena{size_t(1) << 20, Device::cpu, "kv"};
  KvCache cache;
  test::Workspace ws;
};

TEST_P(CachedTest, PrefillThenDecodeEqualsFullForward) {
  EXPECT_LE(kv_arena.used(), kv_cache_bytes(config, 1, kBlocks, kBlockSize));
  prefill_then_decode({5, 9, 3}, 31, 0, 6);
}

// A fresh prefill (no cached position before the new tokens) may run as
// packed causal attention over the new tokens themselves: the same logits,
// and the cache it writes serves the decode steps after it.
TEST_P(CachedTest, FreshPrefillThroughPackedAttention) { prefill_then_decode({7, 2, 11}, 41, 11, 4); }

TEST_P(CachedTest, ChunkedPrefillMixedWithDecode) {
  BlockPool pool(kBlocks, kBlockSize, 4);
  test::HostBatch prompts({10, 4}, config.vocab_size, 32);
  std::vector<int32_t> a(prompts.tokens.begin(), prompts.tokens.begin() + 10);
  std::vector<int32_t> b(prompts.tokens.begin() + 10, prompts.tokens.end());
  std::vector<int32_t> ta, tb;
  // Step 1: b's whole prompt and the first 3 tokens of a.
  pool.reserve(ta, 3);
  pool.reserve(tb, 4);
  HostCachedStep s1({{a.begin(), a.begin() + 3}, b}, {0, 0}, {ta, tb}, pool);
  std::vector<float> l1 = step(s1);
  expect_row(l1, 0, full_last_logits({a.begin(), a.begin() + 3}), "chunk 1 of a");
  expect_row(l1, 1, full_last_logits(b), "prefill of b");
  // Step 2: one decode token of b and the other 7 prompt tokens of a (a second chunk).
  b.push_back(argmax(l1, 1, config.vocab_size));
  pool.reserve(ta, 10);
  pool.reserve(tb, 5);
  HostCachedStep s2({{a.begin() + 3, a.end()}, {b.back()}}, {3, 4}, {ta, tb}, pool);
  std::vector<float> l2 = step(s2);
  expect_row(l2, 0, full_last_logits(a), "chunk 2 of a");
  expect_row(l2, 1, full_last_logits(b), "decode of b");
}

TEST_P(CachedTest, SamplesShareThePromptsBlocks) {
  BlockPool pool(kBlocks, kBlockSize, 5);
  test::HostBatch prompt({8}, config.vocab_size, 33);  // exactly two blocks
  std::vector<int32_t> shared;
  pool.reserve(shared, 8);
  HostCachedStep prefill({prompt.tokens}, {0}, {shared}, pool);
  const std::vector<float> l0 = step(prefill);
  expect_row(l0, 0, full_last_logits(prompt.tokens), "prefill");
  // Two samples continue from the same blocks with different tokens.
  std::vector<int32_t> s0 = prompt.tokens, s1 = prompt.tokens, t0 = shared, t1 = shared;
  s0.push_back(3);
  s1.push_back(17);
  pool.reserve(t0, 9);
  pool.reserve(t1, 9);
  for (int k = 0; k < 3; ++k) {
    HostCachedStep d({{s0.back()}, {s1.back()}}, {int64_t(s0.size()) - 1, int64_t(s1.size()) - 1}, {t0, t1}, pool);
    const std::vector<float> l = step(d);
    expect_row(l, 0, full_last_logits(s0), "sample 0");
    expect_row(l, 1, full_last_logits(s1), "sample 1");
    s0.push_back(argmax(l, 0, config.vocab_size));
    s1.push_back(argmax(l, 1, config.vocab_size));
    pool.reserve(t0, int64_t(s0.size()));
    pool.reserve(t1, int64_t(s1.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CachedTest, testing::ValuesIn(test::kTinyArchs),
                         [](const testing::TestParamInfo<test::TinyArch>& i) { return test::tiny_arch_name(i.param); });

TEST(CachedDeathTest, MismatchedStepIsFatal) {
  const parallel::Comm tp = parallel::Comm::world();
  const Qwen2Config c = test::tiny_config(false);
  ParamStore store(c, 0, 1);
  Qwen2Model m(store, tp);
  Arena kv(size_t(1) << 20, Device::cpu, "kv");
  KvCache cache = allocate_kv_cache(kv, c, 1, 8, 4);
  BlockPool pool(8, 4, 1);
  std::vector<int32_t> table;
  pool.reserve(table, 3);
  HostCachedStep s({{1, 2, 3}}, {0}, {table}, pool);
  test::Workspace ws;
  std::vector<float> logits(2 * 64);
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);
    f();
  };
  EXPECT_DEATH(die([&] { m.forward_cached(ws.ctx, ws.act, cache, s.view(), tensor_f32(logits.data(), {2, 64})); }),
               "forward_cached: logits \\(2, 64\\), expected \\(1, ");
  CachedBatch bad = s.view();
  bad.context_lens = tensor_i32(s.context_lens.data(), {0});
  EXPECT_DEATH(die([&] { m.forward_cached(ws.ctx, ws.act, cache, bad, tensor_f32(logits.data(), {1, 64})); }),
               "must describe the 1 sequences");
  KvCache short_cache = cache;
  short_cache.k.pop_back();
  EXPECT_DEATH(die([&] {
                 m.forward_cached(ws.ctx, ws.act, short_cache, s.view(), tensor_f32(logits.data(), {1, 64}));
               }),
               "KV cache of 1 layers for a model of 2");
}

}  // namespace
}  // namespace dapo::model
