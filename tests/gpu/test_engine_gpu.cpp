// The generation engine on one GPU (bf16 weights, bf16 paged KV cache,
// device sampling) against dapo's CPU engine and model (fp32) and the HF
// fixture: greedy tokens agree wherever the fp32 model's top-1/top-2 margin
// is clear of bf16 noise, and every greedy token the GPU picks is a top-1
// of the fp32 model up to that noise; the same seed twice gives the same
// bits; a pool too small for the batch preempts and still completes every
// response; the log-probs returned are those of the full softmax.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "dapo/core/error.h"
#include "dapo/io/safetensors.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"
#include "dapo/rollout/engine.h"
#include "gpu/gpu_test_util.h"
#include "model/fixture_util.h"
#include "model/model_test_util.h"
#include "rollout/trainer_logprobs.h"

namespace dapo::test {
namespace {

// Logit gaps below this are within the bf16 model's noise (the cached
// forward test measures ~0.02 relative error on the logits).
constexpr float kTie = 0.05f;

// Head dim 128, GQA 4:1, a vocabulary that is not a power of two.
model::Qwen2Config mid_config() { return test::mid_config(1, 4096); }

// The same tokens and the same log-prob bits.
void expect_same_bits(const rollout::RolloutBatch& a, const rollout::RolloutBatch& b) {
  EXPECT_EQ(a.response_tokens, b.response_tokens);
  ASSERT_EQ(a.sampling_logprobs.size(), b.sampling_logprobs.size());
  EXPECT_EQ(0, std::memcmp(a.sampling_logprobs.data(), b.sampling_logprobs.data(),
                           b.sampling_logprobs.size() * sizeof(float)));
}

class EngineGpu : public GpuTest {
 protected:
  // The same weights on both backends: fp32 on the host, rounded to bf16
  // first so that both models start from the same values.
  void load_random(const model::Qwen2Config& c, uint64_t seed) {
    config_ = c;
    cpu_store_ = std::make_unique<model::ParamStore>(c, 0, 1);
    model::RandomInit init;
    init.seed = seed;
    init.weight_scale = 0.08f;
    cpu_store_->init_random(init);
    finish_load();
  }

  void load_fixture(const std::string& dir) {
    config_ = model::load_qwen2_config(dir + "/config.json");
    cpu_store_ = std::make_unique<model::ParamStore>(config_, 0, 1);
    const io::SafetensorsFile weights(dir + "/model.safetensors");
    for (const model::ParamEntry& e : cpu_store_->entries()) {
      const std::vector<float> v = read_f32(weights, e.spec.name);
      cpu_store_->load_full(e.spec.name, v.data(), int64_t(v.size()));
    }
    finish_load();
  }

  void finish_load() {
    for (const model::ParamEntry& e : cpu_store_->entries()) {
      float* p = e.param.ptr<float>();
      for (int64_t i = 0; i < e.param.numel(); ++i) p[i] = to_f32(to_bf16(p[i]));
    }
    gpu_store_ = std::make_unique<model::ParamStore>(config_, 0, 1, Device::cuda, gpu().stream);
    for (const model::ParamEntry& e : cpu_store_->entries())
      gpu_store_->load_local(e.spec.name, e.param.ptr<float>(), e.param.numel());
    cpu_model_ = std::make_unique<model::Qwen2Model>(*cpu_store_, tp_);
    gpu_model_ = std::make_unique<model::Qwen2Model>(*gpu_store_, tp_);
  }

  rollout::RolloutBatch run(bool on_gpu, const std::vector<rollout::PromptInput>& prompts,
                            const rollout::SamplingOptions& s, rollout::EngineOptions o = {}) {
    o.check_tp_agreement = false;
    rollout::GenerationEngine engine(on_gpu ? *gpu_model_ : *cpu_model_, tp_, on_gpu ? gpu() : cpu(), o);
    rollout::RolloutBatch b = engine.generate(prompts, s);
    stats_ = engine.stats();
    b.check();
    if (on_gpu) {
      const ops::DeviceFlags f = device_->read_flags();
      EXPECT_EQ(f.bad_id_count + f.non_finite_count, 0);
    }
    return b;
  }

  // The fp32 model's logits (L, V) at every position of `tokens` (one
  // sequence): row i predicts token i + 1.
  std::vector<float> cpu_logits(const std::vector<int32_t>& tokens) { return host_logits(*cpu_model_, tokens); }

  // For response r of `b`: the fp32 model's gap max(logits) - logits[token]
  // at each of its tokens (teacher-forced on the response itself).
  std::vector<float> gaps(const rollout::RolloutBatch& b, int64_t r) {
    const std::span<const int32_t> prompt = b.prompt(b.response_prompt[size_t(r)]), resp = b.response(r);
    std::vector<int32_t> seq(prompt.begin(), prompt.end());
    seq.insert(seq.end(), resp.begin(), resp.end());
    const std::vector<float> logits = cpu_logits(seq);
    const int64_t V = config_.vocab_size;
    std::vector<float> out;
    for (size_t i = 0; i < resp.size(); ++i) {
      const float* row = logits.data() + (prompt.size() - 1 + i) * size_t(V);
      out.push_back(*std::max_element(row, row + V) - row[resp[i]]);
    }
    return out;
  }

  // The top-1/top-2 gap of the fp32 model after prompt + response[0, i).
  float clear_margin(std::span<const int32_t> prompt, std::span<const int32_t> resp, size_t i) {
    std::vector<int32_t> seq(prompt.begin(), prompt.end());
    seq.insert(seq.end(), resp.begin(), resp.begin() + std::ptrdiff_t(i));
    const std::vector<float> logits = cpu_logits(seq);
    const int64_t V = config_.vocab_size;
    std::vector<float> row(logits.end() - V, logits.end());
    std::nth_element(row.begin(), row.begin() + 1, row.end(), std::greater<float>());
    return row[0] - row[1];
  }

  // Two greedy continuations of one prompt agree up to their first
  // difference, and that difference comes where the fp32 model is tied.
  void expect_agree_until_tie(std::span<const int32_t> prompt, std::span<const int32_t> a,
                              std::span<const int32_t> ref, const std::string& what, float tie = kTie) {
    const size_t n = std::min(a.size(), ref.size());
    size_t i = 0;
    while (i < n && a[i] == ref[i]) ++i;
    if (i < n) EXPECT_LT(clear_margin(prompt, ref, i), tie) << what << ": first difference at token " << i;
    ++compared_;
    full_agreements_ += i == n;
  }

  static std::vector<rollout::PromptInput> random_prompts(const std::vector<int>& lengths, int64_t V, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> id(0, int32_t(V - 1));
    std::vector<rollout::PromptInput> out;
    for (size_t i = 0; i < lengths.size(); ++i) {
      rollout::PromptInput p;
      p.uid = 0x5000 + seed * 100 + i;
      for (int t = 0; t < lengths[i]; ++t) p.ids.push_back(id(gen));
      out.push_back(p);
    }
    return out;
  }

  parallel::Comm tp_ = parallel::Comm::world();
  model::Qwen2Config config_;
  std::unique_ptr<model::ParamStore> cpu_store_, gpu_store_;
  std::unique_ptr<model::Qwen2Model> cpu_model_, gpu_model_;
  rollout::GenerationStats stats_;
  int compared_ = 0, full_agreements_ = 0;
};

rollout::SamplingOptions greedy(int64_t n, int64_t len) {
  rollout::SamplingOptions s;
  s.n = n;
  s.temperature = 0;
  s.max_response_length = len;
  s.seed = 7;
  return s;
}

// The HF fixture's greedy continuations (fp32 transformers) and the CPU
// engine's, against the GPU engine's. This model's logits are larger than
// the random models' (the fixture searched for confident continuations), and
// so is their bf16 noise: ties are gaps below 0.1 here.
class EngineGpuFixture : public EngineGpu, public ::testing::WithParamInterface<std::string> {};

TEST_P(EngineGpuFixture, GreedyAgreesWithHfAndTheCpuEngine) {
  const std::string dir = fixtures_dir() + "/model/" + GetParam();
  if (!std::filesystem::exists(dir + "/expected.json")) GTEST_SKIP() << dir << " is absent";
  load_fixture(dir);
  nlohmann::json expected;
  std::ifstream(dir + "/expected.json") >> expected;
  std::vector<rollout::PromptInput> prompts;
  for (size_t i = 0; i < expected["prompts"].size(); ++i)
    prompts.push_back({uint64_t(100 + i), expected["prompts"][i].get<std::vector<int32_t>>()});
  const int64_t len = expected["new_tokens"].get<int64_t>();
  const rollout::RolloutBatch g = run(true, prompts, greedy(1, len)), c = run(false, prompts, greedy(1, len));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> hf = expected["continuations"][i].get<std::vector<int32_t>>();
    ASSERT_EQ(g.response_length(int64_t(i)), len);
    expect_agree_until_tie(g.prompt(int64_t(i)), g.response(int64_t(i)), hf, "GPU vs HF, prompt " + std::to_string(i),
                           0.1f);
    expect_agree_until_tie(g.prompt(int64_t(i)), g.response(int64_t(i)), c.response(int64_t(i)),
                           "GPU vs CPU engine, prompt " + std::to_string(i), 0.1f);
  }
  EXPECT_GT(full_agreements_, 0);
}

// Qwen2 (head dim 64) and Qwen3 (head dim 128, q/k norms).
INSTANTIATE_TEST_SUITE_P(Fixtures, EngineGpuFixture, ::testing::Values("small_d64", "qwen3_d128"),
                         [](const auto& info) { return info.param; });

// Longer greedy answers of a model with real head proportions, prompts
// crossing block boundaries, n = 3 samples sharing their prompt's blocks
// (copy-on-write on the GPU), decode steps replayed as CUDA graphs and run
// eagerly: the samples are equal, and every token is a top-1 of the fp32
// model up to bf16 noise.
TEST_F(EngineGpu, GreedyTokensAreTopOneOfTheFp32Model) {
  load_random(mid_config(), 11);
  const auto prompts = random_prompts({5, 16, 17, 40, 1}, config_.vocab_size, 3);
  const rollout::RolloutBatch c = run(false, prompts, greedy(3, 48));
  for (const bool graphs : {true, false}) {
    rollout::EngineOptions o;
    o.cuda_graphs = graphs;
    const rollout::RolloutBatch g = run(true, prompts, greedy(3, 48), o);
    ASSERT_EQ(g.num_responses(), 15);
    EXPECT_GT(stats_.scheduler.block_copies, 0);
    EXPECT_EQ(stats_.decode_graphs > 0, graphs);
    for (int64_t r = 0; r < g.num_responses(); ++r) {
      ASSERT_EQ(g.response_length(r), 48);
      const std::vector<float> gap = gaps(g, r);
      for (size_t i = 0; i < gap.size(); ++i)
        EXPECT_LT(gap[i], kTie) << "graphs " << graphs << " response " << r << " token " << i;
      const int64_t first = r - g.sample_index[size_t(r)];
      EXPECT_TRUE(std::ranges::equal(g.response(r), g.response(first))) << "greedy samples " << r << ", " << first;
      if (g.sample_index[size_t(r)] == 0)
        expect_agree_until_tie(g.prompt(g.response_prompt[size_t(r)]), g.response(r), c.response(r),
                               "GPU vs CPU engine, response " + std::to_string(r));
    }
  }
}

// Sampling at T = 0.8 with top-k and top-p: the same seed twice gives the
// same tokens and log-prob bits; the log-probs are the full softmax's at
// T (teacher-forced on the fp32 model), not the truncated distribution's.
TEST_F(EngineGpu, SampledRunsRepeatBitForBitAndLogprobsAreTheFullSoftmax) {
  load_random(mid_config(), 12);
  const auto prompts = random_prompts({9, 33, 2}, config_.vocab_size, 4);
  rollout::SamplingOptions s;
  s.n = 4;
  s.temperature = 0.8;
  s.top_k = 50;
  s.top_p = 0.9;
  s.max_response_length = 40;
  s.seed = 99;
  s.step = 3;
  const rollout::RolloutBatch a = run(true, prompts, s), b = run(true, prompts, s);
  EXPECT_EQ(a.response_tokens, b.response_tokens);
  ASSERT_EQ(a.sampling_logprobs.size(), b.sampling_logprobs.size());
  EXPECT_EQ(0, std::memcmp(a.sampling_logprobs.data(), b.sampling_logprobs.data(),
                           a.sampling_logprobs.size() * sizeof(float)));
  // Samples of one prompt differ (distinct random streams).
  EXPECT_NE(std::vector<int32_t>(a.response(0).begin(), a.response(0).end()),
            std::vector<int32_t>(a.response(1).begin(), a.response(1).end()));
  const int64_t V = config_.vocab_size;
  for (int64_t r = 0; r < a.num_responses(); r += 3) {
    const std::span<const int32_t> prompt = a.prompt(a.response_prompt[size_t(r)]), resp = a.response(r);
    std::vector<int32_t> seq(prompt.begin(), prompt.end());
    seq.insert(seq.end(), resp.begin(), resp.end());
    const std::vector<float> logits = cpu_logits(seq);
    for (size_t i = 0; i < resp.size(); ++i) {
      const float* row = logits.data() + (prompt.size() - 1 + i) * size_t(V);
      double mx = -1e30, sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]) / s.temperature);
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) / s.temperature - mx);
      const double want = double(row[resp[i]]) / s.temperature - mx - std::log(sum);
      EXPECT_NEAR(a.logprobs(r)[i], want, 0.05 + 0.02 * std::fabs(want)) << "response " << r << " token " << i;
    }
  }
}

// rollout.exact_logprobs on the GPU: under batch-invariant arithmetic the
// engine's log-prob of every sampled token is, bit for bit, the trainer's
// (forward_logprob over packs of 1 and 5 responses, forward_train), with
// CUDA graphs and launch-ahead or eagerly, one sequence at a time with
// chunked prefills, a pool so small that sequences are preempted, and
// speculative rows; every composition samples the same tokens. The
// default mode differs by bf16 rounding only.
class EngineGpuExact : public EngineGpu {
 protected:
  void check_exact(const model::Qwen2Config& c, uint64_t seed);
};

void EngineGpuExact::check_exact(const model::Qwen2Config& c, uint64_t seed) {
  load_random(c, seed);
  model::ModelOptions mo;
  mo.batch_invariant = true;
  const model::Qwen2Model exact(*gpu_store_, tp_, mo);
  auto prompts = random_prompts({9, 33, 2, 70, 16, 5}, config_.vocab_size, 8);
  prompts[5].ids = prompts[3].ids;  // a shared prefix
  prompts[5].ids.resize(40);
  rollout::SamplingOptions s;
  s.n = 3;
  s.temperature = 0.8;
  s.max_response_length = 48;
  s.seed = 5;
  s.step = 1;
  const float inv_t = float(1.0 / s.temperature);
  // The trainer's log-probs of b's response tokens on the GPU.
  auto trainer = [&](const model::Qwen2Model& m, const rollout::RolloutBatch& b, int64_t per_pack, bool train) {
    std::vector<float> out(b.sampling_logprobs.size(), 0.0f);
    for (int64_t r0 = 0; r0 < b.num_responses(); r0 += per_pack) {
      PackedResponses p;
      for (int64_t r = r0; r < std::min(b.num_responses(), r0 + per_pack); ++r) p.add(b, r);
      const int64_t T = int64_t(p.tokens.size()), S = int64_t(p.cu.size()) - 1;
      int64_t longest = 0;
      for (int64_t i = 0; i < S; ++i) longest = std::max<int64_t>(longest, p.cu[size_t(i + 1)] - p.cu[size_t(i)]);
      ArenaScope scope(*arena_);
      Arena act(train ? m.train_activation_bytes(T) : m.inference_activation_bytes(T), Device::cuda, "act");
      Arena scratch(m.scratch_bytes(T, longest, 0, 1) + Arena::kAlign, Device::cuda, "scratch");
      model::PackedBatch batch{upload_raw(p.tokens, {T}), upload_raw(p.positions, {T}), upload_raw(p.cu, {S + 1}),
                               upload_raw(p.targets, {T})};
      batch.max_seqlen = longest;
      Tensor lp = device_empty(DType::f32, {T}), en = device_empty(DType::f32, {T});
      const ops::Ctx ctx = device_->ctx(&scratch);
      if (train) {
        model::Activations saved;
        m.forward_train(ctx, act, batch, inv_t, lp, en, saved);
      } else {
        m.forward_logprob(ctx, act, batch, inv_t, lp, en);
      }
      const std::vector<float> host = download(lp);
      for (const auto& [r, first] : p.at)
        for (int64_t j = 0; j < b.response_length(r); ++j)
          out[size_t(b.response_offsets[size_t(r)] + j)] = host[size_t(first + j)];
    }
    return out;
  };
  rollout::EngineOptions graphs;
  graphs.check_tp_agreement = false;
  rollout::EngineOptions eager = graphs;
  eager.cuda_graphs = false;
  eager.launch_ahead = false;
  rollout::EngineOptions narrow = graphs;
  narrow.max_num_seqs = 1;
  narrow.max_batch_tokens = 16;
  rollout::EngineOptions tight = graphs;
  tight.block_size = 16;
  tight.kv_cache_bytes = model::kv_cache_bytes(config_, 1, 24, 16, Device::cuda);
  rollout::EngineOptions spec = graphs;
  spec.spec_tokens = 3;
  spec.spec_max_running = 64;
  const std::pair<const char*, rollout::EngineOptions> cases[] = {
      {"graphs", graphs}, {"eager", eager}, {"one at a time", narrow}, {"tight pool", tight}, {"speculation", spec}};
  std::vector<int32_t> tokens;
  for (const auto& [what, o] : cases) {
    SCOPED_TRACE(what);
    rollout::GenerationEngine engine(exact, tp_, gpu(), o);
    const rollout::RolloutBatch b = engine.generate(prompts, s);
    b.check();
    if (std::string(what) == "tight pool") EXPECT_GT(engine.stats().scheduler.preemptions, 0);
    if (std::string(what) == "graphs") EXPECT_GT(engine.stats().decode_graphs, 0);
    if (tokens.empty()) tokens = b.response_tokens;
    EXPECT_EQ(b.response_tokens, tokens) << "the tokens depend on the batch";
    for (const int64_t per_pack : {int64_t(1), int64_t(5)}) {
      const std::vector<float> t = trainer(exact, b, per_pack, false);
      EXPECT_EQ(0, std::memcmp(t.data(), b.sampling_logprobs.data(), t.size() * sizeof(float)))
          << per_pack << " per pack";
    }
    if (std::string(what) == "graphs") {
      const std::vector<float> t = trainer(exact, b, 4, true);
      EXPECT_EQ(0, std::memcmp(t.data(), b.sampling_logprobs.data(), t.size() * sizeof(float))) << "forward_train";
    }
  }
  // The default mode: the same model without batch invariance, bounded.
  const rollout::RolloutBatch d = run(true, prompts, s);
  const std::vector<float> t = trainer(*gpu_model_, d, 5, false);
  double max_diff = 0;
  for (size_t i = 0; i < t.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(t[i]) - d.sampling_logprobs[i]));
  std::printf("[ info ] default mode: max |engine - trainer| log-prob %.4g over %zu tokens\n", max_diff, t.size());
  EXPECT_GT(max_diff, 0.0);  // the fast kernels do sum otherwise
  EXPECT_LT(max_diff, 0.5);
}

TEST_F(EngineGpuExact, ExactLogprobsAreTheTrainersBitForBit) { check_exact(mid_config(), 21); }

// Qwen3: the engine runs the trainer's q/k norms instead of the ones fused
// into the cache write.
TEST_F(EngineGpuExact, Qwen3ExactLogprobsAreTheTrainersBitForBit) { check_exact(test::mid_qwen3_config(4096), 22); }

// Launch-ahead (EngineOptions::launch_ahead, on by default): the decode
// step after a running one is launched before the running one's tokens
// reach the host, its input tokens copied on the device. Without ends in
// between every step has the same rows either way, so the bits are the
// same; with EOS ids, the rows of responses that just ended ride along
// once, dropped (a step's batch-size bucket, and with it the products'
// plans, can then differ from a run without: the bits of such a run are
// its own, and the same at every rerun).
TEST_F(EngineGpu, LaunchAheadGivesTheSameResponses) {
  load_random(mid_config(), 15);
  const auto prompts = random_prompts({9, 33, 2, 17}, config_.vocab_size, 6);
  rollout::SamplingOptions s;
  s.n = 3;
  s.temperature = 1.0;
  s.max_response_length = 48;
  s.seed = 5;
  rollout::EngineOptions o;
  o.spec_tokens = 0;  // speculative steps are never launched ahead
  o.launch_ahead = false;
  const rollout::RolloutBatch plain = run(true, prompts, s, o);
  EXPECT_EQ(stats_.steps_ahead, 0);
  o.launch_ahead = true;
  const rollout::RolloutBatch ahead = run(true, prompts, s, o);
  EXPECT_GT(stats_.steps_ahead, 30);
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(ahead, plain));
  // Ends on the way: every response completes, at its EOS or at full length.
  for (int32_t id = 3; id < config_.vocab_size; id += 40) s.eos_ids.push_back(id);
  const rollout::RolloutBatch ended = run(true, prompts, s, o);
  EXPECT_GT(stats_.steps_ahead, 0);
  // As the batch drains, smaller buckets' first steps replay a larger graph.
  EXPECT_GT(stats_.padded_graph_steps, 0);
  ASSERT_EQ(ended.num_responses(), 12);
  int64_t eos = 0;
  for (int64_t r = 0; r < ended.num_responses(); ++r) {
    const bool at_eos = ended.finish_reason[size_t(r)] == rollout::FinishReason::eos;
    eos += at_eos;
    if (!at_eos) EXPECT_EQ(ended.response_length(r), 48);
  }
  EXPECT_GT(eos, 0);
  EXPECT_EQ(stats_.scheduler.sampled_tokens, ended.total_response_tokens());
  const rollout::RolloutBatch again = run(true, prompts, s, o);
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(again, ended));
}

// Exact speculative decoding (rollout/scheduler.h) on the GPU, in decode
// graphs: greedy answers of a random model repeat themselves, so n-gram
// drafts are taken; the kept tokens are plain decoding's up to a tie of the
// fp32 model (a step with draft rows has other products' plans, so other
// roundings); sampled answers are mostly the same bits as plain decoding's;
// a rerun gives the same bits.
TEST_F(EngineGpu, SpeculationKeepsThePlainTokens) {
  load_random(mid_config(), 17);
  const auto prompts = random_prompts({9, 33, 2, 17}, config_.vocab_size, 8);
  rollout::EngineOptions off, on;
  off.spec_tokens = 0;
  on.spec_tokens = 4;
  on.spec_max_running = 64;
  const rollout::RolloutBatch plain = run(true, prompts, greedy(2, 96), off);
  EXPECT_EQ(stats_.scheduler.drafted_tokens, 0);
  const rollout::RolloutBatch spec = run(true, prompts, greedy(2, 96), on);
  EXPECT_GT(stats_.scheduler.drafted_tokens, 0);
  EXPECT_GT(stats_.scheduler.accepted_tokens, 0);
  EXPECT_GT(stats_.decode_graphs, 0);
  EXPECT_EQ(stats_.scheduler.sampled_tokens, spec.total_response_tokens());
  for (int64_t r = 0; r < spec.num_responses(); ++r)
    expect_agree_until_tie(spec.prompt(spec.response_prompt[size_t(r)]), spec.response(r), plain.response(r),
                           cat("greedy response ", r));
  const rollout::RolloutBatch again = run(true, prompts, greedy(2, 96), on);
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(again, spec));

  // Sampled answers long enough to outlast a speculation pause: 16 steps
  // without a draft at the start (an answer has not repeated itself yet)
  // pause it for 256 steps (Scheduler::kSpecDryLimit, kSpecPauseSteps), so
  // drafts come after that; at a low temperature a random model's answers
  // loop as its greedy ones do.
  rollout::SamplingOptions s;
  s.n = 3;
  s.temperature = 0.3;
  s.top_k = 50;
  s.top_p = 0.9;
  s.max_response_length = 384;
  s.seed = 7;
  const rollout::RolloutBatch sampled_plain = run(true, prompts, s, off);
  const rollout::RolloutBatch sampled_spec = run(true, prompts, s, on);
  EXPECT_GT(stats_.scheduler.drafted_tokens, 0);
  // A draw that lands within the roundings of a boundary of the sampled
  // distribution takes another token (a step with draft rows has other
  // products' plans), and the answers part there: most tokens come before
  // such a point.
  int64_t common = 0, total = 0;
  for (int64_t r = 0; r < sampled_spec.num_responses(); ++r) {
    const auto a = sampled_spec.response(r), b = sampled_plain.response(r);
    common += std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
    total += int64_t(b.size());
  }
  EXPECT_GE(common, total * 3 / 4);
  const rollout::RolloutBatch sampled_again = run(true, prompts, s, on);
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(sampled_again, sampled_spec));
}

// Decode graphs captured while a long prefill step runs (the engine's
// capture-ahead) are the graphs a run without it captures at its first
// decode steps: the same responses, bit for bit.
TEST_F(EngineGpu, GraphsCapturedDuringPrefillGiveTheSameResponses) {
  load_random(mid_config(), 16);
  // One prefill step of 8 x 600 = 4,800 positions (>= the 4,096 that let
  // the engine capture while it waits), then decode steps of 8 sequences.
  const auto prompts = random_prompts(std::vector<int>(8, 600), config_.vocab_size, 7);
  rollout::SamplingOptions s;
  s.temperature = 1.0;
  s.max_response_length = 40;
  s.seed = 3;
  rollout::EngineOptions o;
  o.max_batch_tokens = 8192;
  o.capture_graphs_ahead = false;
  const rollout::RolloutBatch plain = run(true, prompts, s, o);
  EXPECT_EQ(stats_.graphs_captured_ahead, 0);
  o.capture_graphs_ahead = true;
  const rollout::RolloutBatch ahead = run(true, prompts, s, o);
  EXPECT_GT(stats_.graphs_captured_ahead, 0);
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(ahead, plain));
}

// A pool of a few sequences for 12 responses: sequences queue and get
// preempted, are recomputed from their tokens, and every response ends at
// full length with top-1 tokens.
TEST_F(EngineGpu, ASmallPoolPreemptsAndCompletesEveryResponse) {
  load_random(mid_config(), 13);
  const auto prompts = random_prompts({20, 7, 30}, config_.vocab_size, 5);
  rollout::EngineOptions o;
  o.block_size = 16;
  // 12 blocks (~3 full sequences) for the scheduler, one for the decode
  // graphs' padding rows.
  o.kv_cache_bytes = model::kv_cache_bytes(config_, 1, 13, 16, Device::cuda);
  const rollout::RolloutBatch g = run(true, prompts, greedy(4, 64), o);
  EXPECT_GT(stats_.scheduler.preemptions, 0);
  EXPECT_EQ(stats_.num_blocks, 12);
  ASSERT_EQ(g.num_responses(), 12);
  for (int64_t r = 0; r < g.num_responses(); ++r) {
    ASSERT_EQ(g.response_length(r), 64);
    const std::vector<float> gap = gaps(g, r);
    for (size_t i = 0; i < gap.size(); ++i) EXPECT_LT(gap[i], kTie) << "response " << r << " token " << i;
  }
}

// Without a budget the pool takes what the requests need when that fits,
// and no more than the fraction of free memory when it does not.
TEST_F(EngineGpu, ThePoolIsSizedFromTheRequestsAndTheFreeMemory) {
  load_random(mid_config(), 14);
  const auto prompts = random_prompts({10, 10}, config_.vocab_size, 6);
  rollout::EngineOptions o;
  o.block_size = 16;
  run(true, prompts, greedy(2, 20), o);
  const int64_t per_seq = (10 + 20 + 15) / 16;
  EXPECT_GE(stats_.num_blocks, 4 * per_seq);
  EXPECT_LE(stats_.num_blocks, 4 * (per_seq + 1));
  o.kv_cache_memory_fraction = 1e-9;  // a floor of one full sequence still runs everything
  const rollout::RolloutBatch b = run(true, prompts, greedy(2, 20), o);
  EXPECT_EQ(stats_.num_blocks, per_seq);
  EXPECT_EQ(b.total_response_tokens(), 4 * 20);
}

}  // namespace
}  // namespace dapo::test
