// The generation engine on a tiny random Qwen2: token for token what the
// naive loop (full forward of the whole sequence at every token, the same
// sampling keys) produces, greedy and sampled; a response does not change
// with the batch around it, the batch limits or a KV budget so small that
// sequences queue and get preempted; a prompt is prefilled once for all its
// samples; EOS and length stops; progress reports; the KV budget planning.
#include "dapo/rollout/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "dapo/core/error.h"
#include "dapo/parallel/comm.h"
#include "dapo/rollout/reference_generate.h"
#include "model/model_test_util.h"
#include "rollout/engine_test_util.h"

namespace dapo::rollout {
namespace {

class EngineTest : public testing::Test {
 protected:
  void SetUp() override {
    config = test::tiny_config(false);
    store = std::make_unique<model::ParamStore>(config, 0, 1);
    store->init_random(test::tiny_init(5));
    model = std::make_unique<model::Qwen2Model>(*store, tp);
  }

  RolloutBatch run(const std::vector<PromptInput>& prompts, const SamplingOptions& s, EngineOptions o = {}) {
    GenerationEngine engine(*model, tp, ops::Ctx{}, o);
    RolloutBatch b = engine.generate(prompts, s);
    last_stats = engine.stats();
    b.check();
    return b;
  }

  parallel::Comm tp = parallel::Comm::world();
  model::Qwen2Config config;
  std::unique_ptr<model::ParamStore> store;
  std::unique_ptr<model::Qwen2Model> model;
  GenerationStats last_stats;
};

using test::engine_opts;
using test::prompts_of;

std::vector<int32_t> tokens_of(const RolloutBatch& b, int64_t r) { return {b.response(r).begin(), b.response(r).end()}; }

// Same responses; log-probs to fp32 tolerance (the cached and the full
// forward sum in different orders).
void expect_same_responses(const RolloutBatch& got, const RolloutBatch& want, const std::string& what) {
  ASSERT_EQ(got.num_responses(), want.num_responses()) << what;
  EXPECT_EQ(got.prompt_uid, want.prompt_uid) << what;
  for (int64_t r = 0; r < want.num_responses(); ++r) {
    EXPECT_EQ(got.response_prompt[size_t(r)], want.response_prompt[size_t(r)]) << what;
    EXPECT_EQ(got.sample_index[size_t(r)], want.sample_index[size_t(r)]) << what;
    ASSERT_EQ(tokens_of(got, r), tokens_of(want, r)) << what << ": response " << r;
    EXPECT_EQ(got.finish_reason[size_t(r)], want.finish_reason[size_t(r)]) << what << ": response " << r;
    const auto a = got.logprobs(r), b = want.logprobs(r);
    for (size_t t = 0; t < b.size(); ++t) EXPECT_NEAR(a[t], b[t], 2e-4) << what << ": response " << r << " token " << t;
  }
}

SamplingOptions greedy(int64_t n, int64_t max_len) {
  SamplingOptions s;
  s.n = n;
  s.temperature = 0;
  s.max_response_length = max_len;
  s.seed = 3;
  return s;
}

SamplingOptions sampled(int64_t n, int64_t max_len) {
  SamplingOptions s;
  s.n = n;
  s.temperature = 0.9;
  s.top_p = 0.95;
  s.top_k = 40;
  s.max_response_length = max_len;
  s.seed = 11;
  s.step = 4;
  return s;
}

TEST_F(EngineTest, GreedyEqualsTheNaiveLoop) {
  const auto prompts = prompts_of({1, 5, 9, 13, 4}, 1);
  for (int64_t n : {1, 3}) {
    const SamplingOptions s = greedy(n, 12);
    const RolloutBatch want = reference_generate(*model, ops::Ctx{}, prompts, s);
    expect_same_responses(run(prompts, s, engine_opts(4, 0, 256, 4096)), want, cat("greedy n=", n));
    // Greedy samples of one prompt are all the same.
    for (int64_t p = 0; p < want.num_prompts(); ++p)
      for (int64_t k = 1; k < n; ++k) EXPECT_EQ(tokens_of(want, p * n + k), tokens_of(want, p * n));
  }
}

TEST_F(EngineTest, SampledEqualsTheNaiveLoop) {
  const auto prompts = prompts_of({3, 8, 1, 11}, 2);
  const SamplingOptions s = sampled(4, 10);
  const RolloutBatch want = reference_generate(*model, ops::Ctx{}, prompts, s);
  expect_same_responses(run(prompts, s, engine_opts(4, 0, 256, 4096)), want, "sampled");
  // The samples of a prompt differ (a check that the keys differ per sample).
  int64_t distinct = 0;
  for (int64_t k = 1; k < 4; ++k) distinct += tokens_of(want, k) != tokens_of(want, 0);
  EXPECT_GT(distinct, 0);
  // Another step or seed draws other tokens.
  SamplingOptions other = s;
  other.step = 5;
  EXPECT_NE(run(prompts, other).response_tokens, want.response_tokens);
  other = s;
  other.seed = 12;
  EXPECT_NE(run(prompts, other).response_tokens, want.response_tokens);
}

TEST_F(EngineTest, AResponseDoesNotDependOnTheBatchAroundIt) {
  const auto target = prompts_of({7}, 3);
  const auto others = prompts_of({2, 12, 5, 9, 3, 6}, 4);
  const SamplingOptions s = sampled(3, 14);
  const RolloutBatch alone = run(target, s);
  EXPECT_EQ(last_stats.scheduler.preemptions, 0);
  // Among others (target in the middle), with roomy and with tight limits.
  std::vector<PromptInput> mixed(others.begin(), others.begin() + 3);
  mixed.push_back(target[0]);
  mixed.insert(mixed.end(), others.begin() + 3, others.end());
  const int64_t at = 3;
  auto target_part = [&](const RolloutBatch& b) {
    RolloutBatch t;
    t.add_prompt(b.prompt_uid[at], b.prompt(at));
    for (int64_t k = 0; k < 3; ++k)
      t.add_response(0, k, b.response(at * 3 + k), b.logprobs(at * 3 + k), b.finish_reason[size_t(at * 3 + k)]);
    return t;
  };
  expect_same_responses(target_part(run(mixed, s)), alone, "among others");
  // One sequence at a time, 2-token steps: prompts queue, prefills are chunked.
  expect_same_responses(target_part(run(mixed, s, engine_opts(4, 0, 3, 2))), alone, "narrow batch");
  EXPECT_GT(last_stats.scheduler.steps, 60);
  // A KV pool of 8 blocks of 4 positions: samples wait and get preempted.
  const size_t tight = model::kv_cache_bytes(config, 1, 8, 4);
  expect_same_responses(target_part(run(mixed, s, engine_opts(4, tight, 64, 64))), alone, "tight KV budget");
  EXPECT_EQ(last_stats.num_blocks, 8);
  EXPECT_GT(last_stats.scheduler.preemptions, 0);
  EXPECT_LE(last_stats.scheduler.peak_blocks, 8);
  // Blocks of one position, many copy-on-writes.
  expect_same_responses(target_part(run(mixed, s, engine_opts(1, 0, 64, 64))), alone, "block size 1");
}

// Launching a decode step while the one before it runs (its tokens fed on
// the device, the rows of sequences that just ended dropped) gives the
// responses of the step-by-step loop whatever the limits: the same tokens,
// log-probs to fp32 tolerance (a dropped row makes the CPU GEMMs block
// another batch, as a response among others does).
TEST_F(EngineTest, LaunchAheadChangesNothing) {
  const auto prompts = prompts_of({3, 8, 1, 11, 6}, 5);
  SamplingOptions s = sampled(3, 16);
  s.eos_ids = {7, 19, 33};  // responses end at different steps
  for (EngineOptions o : {engine_opts(4, 0, 256, 4096), engine_opts(4, 0, 5, 8), engine_opts(1, 0, 64, 64),
                          engine_opts(4, model::kv_cache_bytes(config, 1, 12, 4), 64, 64)}) {
    const std::string what = cat("block size ", o.block_size, ", KV bytes ", o.kv_cache_bytes, ", seqs ",
                                 o.max_num_seqs, ", tokens ", o.max_batch_tokens);
    o.launch_ahead = false;
    const RolloutBatch step_by_step = run(prompts, s, o);
    const GenerationStats plain = last_stats;
    EXPECT_EQ(plain.steps_ahead, 0) << what;
    o.launch_ahead = true;
    const RolloutBatch ahead = run(prompts, s, o);
    EXPECT_GT(last_stats.steps_ahead, 0) << what;
    expect_same_responses(ahead, step_by_step, what);
    EXPECT_EQ(last_stats.scheduler.steps, plain.scheduler.steps) << what;
    EXPECT_EQ(last_stats.scheduler.sampled_tokens, plain.scheduler.sampled_tokens) << what;
    EXPECT_EQ(last_stats.prefill_steps + last_stats.decode_steps, plain.scheduler.steps) << what;
  }
  // Unset, it is off on the CPU backend (nothing to overlap there).
  run(prompts, s, engine_opts(4, 0, 256, 4096));
  EXPECT_EQ(last_stats.steps_ahead, 0);
}

TEST_F(EngineTest, APromptIsPrefilledOnceForAllItsSamples) {
  const auto prompts = prompts_of({10}, 5);
  const RolloutBatch b = run(prompts, sampled(6, 5), engine_opts(4, 0, 64, 4096));
  EXPECT_EQ(b.num_responses(), 6);
  EXPECT_EQ(last_stats.scheduler.prompt_positions, 10);
  EXPECT_EQ(last_stats.scheduler.preemptions, 0);
  EXPECT_EQ(last_stats.scheduler.block_copies, 5);  // the partial block (10 % 4), copied by all but one sample
  EXPECT_EQ(last_stats.scheduler.sampled_tokens, 30);
  EXPECT_EQ(last_stats.scheduler.response_positions, 6 * 4);
}

TEST_F(EngineTest, StopsAtEosOrLength) {
  const auto prompts = prompts_of({4, 6, 3}, 6);
  SamplingOptions s = greedy(1, 9);
  const RolloutBatch free_run = run(prompts, s);
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(free_run.response_length(r), 9);
    EXPECT_EQ(free_run.finish_reason[size_t(r)], FinishReason::length);
  }
  // Make the 4th token of the first response an EOS id (and some id the
  // model may never produce): the response ends there, EOS included.
  const int32_t eos = free_run.response(0)[3];
  s.eos_ids = {63, eos};
  const RolloutBatch stopped = run(prompts, s);
  expect_same_responses(stopped, reference_generate(*model, ops::Ctx{}, prompts, s), "eos");
  const std::vector<int32_t> first = tokens_of(free_run, 0);
  const size_t cut = size_t(std::find(first.begin(), first.end(), eos) - first.begin());
  EXPECT_EQ(tokens_of(stopped, 0), std::vector<int32_t>(first.begin(), first.begin() + std::ptrdiff_t(cut) + 1));
  EXPECT_EQ(stopped.finish_reason[0], FinishReason::eos);
}

TEST_F(EngineTest, ReportsProgress) {
  const auto prompts = prompts_of({3, 5}, 7);
  GenerationEngine engine(*model, tp, ops::Ctx{});
  std::vector<GenerationProgress> seen;
  engine.generate(prompts, sampled(2, 6), [&](const GenerationProgress& p) { seen.push_back(p); });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(int64_t(seen.size()), engine.stats().scheduler.steps);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].step, seen[i - 1].step + 1);
    EXPECT_GE(seen[i].generated_tokens, seen[i - 1].generated_tokens);
  }
  EXPECT_EQ(seen.back().finished, 4);
  EXPECT_EQ(seen.back().total, 4);
  EXPECT_EQ(seen.back().running, 0);
  EXPECT_EQ(seen.back().waiting, 0);
  EXPECT_EQ(seen.back().generated_tokens, engine.stats().scheduler.sampled_tokens);
  EXPECT_GT(seen.back().tokens_per_s, 0.0);
  EXPECT_GT(engine.stats().tokens_per_s, 0.0);
}

TEST_F(EngineTest, KvPoolComesFromTheBudget) {
  // The most blocks whose cache fits: bytes(nb) <= budget < bytes(nb + 1).
  for (int64_t tp_size : {1, 2}) {
    for (int64_t bs : {1, 4, 16}) {
      for (size_t budget : {size_t(5000), size_t(65536), size_t(1) << 20, size_t(123456789)}) {
        const int64_t nb = kv_blocks_for_budget(config, tp_size, bs, budget);
        ASSERT_GE(nb, 1) << bs << " " << budget;
        EXPECT_LE(model::kv_cache_bytes(config, tp_size, nb, bs), budget) << bs << " " << budget;
        EXPECT_GT(model::kv_cache_bytes(config, tp_size, nb + 1, bs), budget) << bs << " " << budget;
      }
    }
  }
  EXPECT_EQ(kv_blocks_for_budget(config, 1, 4, 10), 0);
  GenerationEngine engine(*model, tp, ops::Ctx{}, engine_opts(4, 100, 8, 8));
  try {
    engine.generate(prompts_of({3}, 8), greedy(1, 4));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rollout: a KV-cache budget of 100 bytes cannot hold one block of 4"),
              std::string::npos)
        << e.what();
  }
  // A budget of 2 blocks cannot hold 6 + 4 - 1 positions.
  GenerationEngine small(*model, tp, ops::Ctx{}, engine_opts(4, model::kv_cache_bytes(config, 1, 2, 4), 8, 8));
  try {
    small.generate(prompts_of({6}, 8), greedy(1, 4));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 3 KV-cache blocks of 4 positions, but the KV-cache budget holds only 2"),
              std::string::npos)
        << e.what();
  }
  // A budget beyond what the process may use is refused by its key, before
  // the allocator fails (1 PiB: more than any machine or cgroup gives).
  GenerationEngine huge(*model, tp, ops::Ctx{}, engine_opts(4, size_t(1) << 50, 8, 8));
  try {
    huge.generate(prompts_of({3}, 8), greedy(1, 4));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rollout.kv_cache_gib = 1.04858e+06 GiB is more than this process may use ("),
              std::string::npos)
        << e.what();
  }
  // The automatic budget: enough for the requests, all in flight.
  run(prompts_of({5, 5, 5}, 9), sampled(2, 8), engine_opts(4, 0, 256, 4096));
  EXPECT_EQ(last_stats.scheduler.preemptions, 0);
  EXPECT_GE(last_stats.num_blocks, 6 * 4);
  EXPECT_GT(last_stats.kv_cache_cap_bytes, size_t(0));  // the memory cap it read
  // A pinned cap (the trainer's, kept in checkpoints) bounds the automatic
  // pool instead of free memory: 7 blocks, so sequences wait or are preempted.
  EngineOptions pinned = engine_opts(4, 0, 256, 4096);
  pinned.kv_cache_cap_bytes = model::kv_cache_bytes(config, 1, 7, 4);
  pinned.cuda_graphs = false;
  run(prompts_of({5, 5, 5}, 9), sampled(2, 8), pinned);
  EXPECT_EQ(last_stats.kv_cache_cap_bytes, pinned.kv_cache_cap_bytes);
  EXPECT_EQ(last_stats.num_blocks, 7);
  EXPECT_EQ(last_stats.kv_cache_bytes, pinned.kv_cache_cap_bytes);
}

// max_num_seqs = 0 (the default): every sequence of the round runs as soon
// as the pool has blocks for it, so with a roomy pool all of them run from
// the first decode step, and with a small one the pool alone bounds them.
TEST_F(EngineTest, AdmitsByMemoryByDefault) {
  EXPECT_EQ(engine_seats(EngineOptions{}, 40, 4), 40);
  EXPECT_EQ(engine_seats(EngineOptions{}, 0, 4), 4);
  EXPECT_EQ(engine_seats(EngineOptions{}, 100000, 4), kAutoMaxNumSeqs);
  EXPECT_EQ(engine_seats(EngineOptions{}, 100000, 5000), 5000);
  EXPECT_EQ(engine_seats(engine_opts(4, 0, 8, 64), 40, 4), 8);
  EXPECT_EQ(engine_seats(engine_opts(4, 0, 2, 64), 40, 4), 4);

  const auto prompts = prompts_of({3, 8, 1, 11, 6, 2, 9, 5, 4, 7}, 13);
  SamplingOptions s = sampled(6, 14);
  s.eos_ids = {7, 19, 33};
  const RolloutBatch wide = run(prompts, s, engine_opts(4, 0, 4096, 4096));
  // Every prompt is prefilled in the first step, then every response that
  // did not end at its first token decodes in the second.
  int64_t decoding = 0;
  for (int64_t r = 0; r < wide.num_responses(); ++r) decoding += wide.response_length(r) > 1;
  EXPECT_GT(decoding, 50);
  EXPECT_EQ(last_stats.scheduler.peak_running, decoding);
  const RolloutBatch by_memory = run(prompts, s, engine_opts(4, 0, 0, 4096));
  EXPECT_EQ(last_stats.scheduler.peak_running, decoding);
  EXPECT_EQ(last_stats.scheduler.preemptions, 0);
  // The same steps over the same batches: the same bits.
  EXPECT_EQ(by_memory.response_tokens, wide.response_tokens);
  EXPECT_EQ(by_memory.sampling_logprobs, wide.sampling_logprobs);
  // The old default of 256 seats would have run the same here; 16 seats
  // queue the prompts, and the responses stay what they are.
  expect_same_responses(run(prompts, s, engine_opts(4, 0, 16, 4096)), wide, "16 seats");
  EXPECT_LE(last_stats.scheduler.peak_running, 16);

  // A pool of 24 blocks of 4 positions holds a few sequences at a time:
  // the blocks bound how many run, and every response still completes.
  const size_t small = model::kv_cache_bytes(config, 1, 24, 4);
  expect_same_responses(run(prompts, s, engine_opts(4, small, 0, 4096)), wide, "24 blocks");
  EXPECT_EQ(last_stats.num_blocks, 24);
  EXPECT_LE(last_stats.scheduler.peak_blocks, 24);
  EXPECT_LT(last_stats.scheduler.peak_running, 24);
  EXPECT_GT(last_stats.scheduler.peak_running, 6);
}

EngineOptions speculative(int64_t spec_tokens, int64_t max_running = 1 << 20) {
  EngineOptions o = engine_opts(4, 0, 0, 4096);
  o.spec_tokens = spec_tokens;
  o.spec_max_running = max_running;
  return o;
}

// Exact speculation: the kept tokens are the ones plain decoding samples
// with the same random draws, greedy and sampled (temperature, top-p,
// top-k), at any draft length; a rerun gives the same bits. Greedy answers
// of a random model soon repeat themselves, so drafts are taken there.
TEST_F(EngineTest, SpeculationKeepsTheResponses) {
  EXPECT_EQ(engine_spec_tokens(EngineOptions{}, true), 4);
  EXPECT_EQ(engine_spec_tokens(EngineOptions{}, false), 0);
  const auto prompts = prompts_of({3, 8, 1, 11, 6}, 15);
  SamplingOptions plain_sampled = sampled(4, 24);
  plain_sampled.eos_ids = {7, 19};
  for (const SamplingOptions& s : {greedy(2, 40), plain_sampled}) {
    const RolloutBatch plain = run(prompts, s, speculative(0));
    EXPECT_EQ(last_stats.scheduler.drafted_tokens, 0);
    const int64_t plain_steps = last_stats.scheduler.steps;
    for (const int64_t k : {1, 3, 6}) {
      const std::string what = cat(s.temperature == 0 ? "greedy" : "sampled", ", ", k, " draft tokens");
      const RolloutBatch spec = run(prompts, s, speculative(k));
      const SchedulerStats st = last_stats.scheduler;
      expect_same_responses(spec, plain, what);
      EXPECT_GT(st.drafted_tokens, 0) << what;
      EXPECT_EQ(st.sampled_tokens, spec.total_response_tokens()) << what;
      if (s.temperature == 0) {
        EXPECT_GT(st.accepted_tokens, st.drafted_tokens / 4) << what;
        EXPECT_LT(st.steps, plain_steps) << what;
      }
      const RolloutBatch again = run(prompts, s, speculative(k));
      EXPECT_EQ(again.response_tokens, spec.response_tokens) << what;
      EXPECT_EQ(again.sampling_logprobs, spec.sampling_logprobs) << what;
    }
  }
  // Only in the tail: with 6 sequences or fewer running (of 10; two of
  // the greedy tokens end answers, at different lengths).
  SamplingOptions ending = greedy(2, 40);
  const RolloutBatch free_run = run(prompts, ending, speculative(0));
  ending.eos_ids = {free_run.response(0)[6], free_run.response(4)[15]};
  const RolloutBatch plain_ending = run(prompts, ending, speculative(0));
  const RolloutBatch tail = run(prompts, ending, speculative(3, 6));
  expect_same_responses(tail, plain_ending, "tail");
  EXPECT_GT(last_stats.scheduler.drafted_tokens, 0);
  EXPECT_GT(last_stats.scheduler.spec_steps, 0);
  EXPECT_LT(last_stats.scheduler.spec_steps, last_stats.decode_steps - 3);
}

// The distribution, tested as a statistic: tokens of speculative and of
// plain decoding, drawn with different seeds, by a two-sample chi-square
// test over the vocabulary, at each of three sampling settings. A test
// that cannot pass by identity: the two runs share no random draw.
TEST_F(EngineTest, SpeculationSamplesTheSameDistribution) {
  const auto prompts = prompts_of({2, 3}, 16);
  EXPECT_EQ(engine_step_rows(speculative(4, 10), 600, false), 600);
  EXPECT_EQ(engine_step_rows(speculative(4, 200), 600, false), 1000);
  EXPECT_EQ(engine_step_rows(speculative(0), 600, true), 600);
  EXPECT_EQ(engine_step_rows(EngineOptions{}, 20, true), 40);
  struct Setting {
    double temperature, top_p;
    int64_t top_k;
  };
  for (const Setting set : {Setting{0.6, 1.0, 0}, Setting{1.0, 0.8, 0}, Setting{0.8, 1.0, 12}}) {
    SamplingOptions s = sampled(300, 12);
    s.temperature = set.temperature;
    s.top_p = set.top_p;
    s.top_k = set.top_k;
    s.seed = 21;
    const RolloutBatch plain = run(prompts, s, speculative(0));
    s.seed = 22;
    const RolloutBatch spec = run(prompts, s, speculative(4));
    const SchedulerStats st = last_stats.scheduler;
    const std::string what = cat("T ", set.temperature, ", top-p ", set.top_p, ", top-k ", set.top_k);
    EXPECT_GT(st.accepted_tokens, 100) << what;
    EXPECT_GT(st.drafted_tokens - st.accepted_tokens, 100) << what;
    // Counts of each token at response positions 2.. (those drafts reach).
    std::vector<double> a(64, 0.0), b(64, 0.0);
    auto count = [](const RolloutBatch& batch, std::vector<double>& c) {
      for (int64_t r = 0; r < batch.num_responses(); ++r)
        for (size_t t = 2; t < batch.response(r).size(); ++t) c[size_t(batch.response(r)[t])] += 1;
    };
    count(plain, a);
    count(spec, b);
    double na = 0, nb = 0;
    for (size_t v = 0; v < 64; ++v) na += a[v], nb += b[v];
    // Pool the rare tokens (expected count under 5) into one cell.
    double chi2 = 0, rare_a = 0, rare_b = 0;
    int cells = 0;
    auto add_cell = [&](double x, double y) {
      const double e_a = (x + y) * na / (na + nb), e_b = (x + y) * nb / (na + nb);
      chi2 += (x - e_a) * (x - e_a) / e_a + (y - e_b) * (y - e_b) / e_b;
      ++cells;
    };
    for (size_t v = 0; v < 64; ++v) {
      if ((a[v] + b[v]) * std::min(na, nb) / (na + nb) < 5) {
        rare_a += a[v];
        rare_b += b[v];
      } else {
        add_cell(a[v], b[v]);
      }
    }
    if (rare_a + rare_b > 0) add_cell(rare_a, rare_b);
    // The 0.999 quantile of chi-square with df = cells - 1 (Wilson-Hilferty).
    const double df = cells - 1, z = 3.0902;
    const double q = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
    EXPECT_LT(chi2, q) << what << ": chi2 " << chi2 << " over " << cells << " cells";
    EXPECT_GT(cells, 8) << what;
  }
}

TEST_F(EngineTest, ZeroLengthAndEmptyRequests) {
  const RolloutBatch none = run({}, greedy(2, 5));
  EXPECT_EQ(none.num_prompts(), 0);
  EXPECT_EQ(none.num_responses(), 0);
  const RolloutBatch zero = run(prompts_of({4}, 10), greedy(2, 0));
  ASSERT_EQ(zero.num_responses(), 2);
  EXPECT_EQ(zero.response_length(0), 0);
  EXPECT_EQ(last_stats.scheduler.steps, 0);
}

}  // namespace
}  // namespace dapo::rollout
