// Benchmark of the generation engine on the CPU backend, one rank (tp = 1):
// sampled responses (n per prompt, no EOS, so every response runs to
// max_response_length) for a batch of prompts of a small Qwen2-shaped
// random model, in response tokens per second. The baseline is the naive
// loop (rollout/reference_generate.h: the full forward of the whole
// sequence for every token, one response at a time) on a subset of the same
// prompts; greedy responses of that subset must be the same token for token. Run with OMP_NUM_THREADS=1
// for per-core numbers. Links dapo_rollout (part of DAPO_APP_LIBS).
#include <omp.h>

#include <cstdio>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"
#include "dapo/rollout/engine.h"
#include "dapo/rollout/reference_generate.h"

namespace {

using namespace dapo;

}  // namespace

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  model::Qwen2Config c;
  c.vocab_size = 8192;
  c.hidden_size = 256;
  c.intermediate_size = 704;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 4096;
  c.rope_theta = 1e6;
  const parallel::Comm tp = parallel::Comm::world().split(runtime.world_rank(), 0);
  model::ParamStore store(c, 0, 1);
  model::RandomInit init;
  init.weight_scale = 0.1f;
  store.init_random(init);
  const model::Qwen2Model model(store, tp);

  const int64_t num_prompts = 16, naive_prompts = 2;
  std::vector<rollout::PromptInput> prompts;
  for (int64_t p = 0; p < num_prompts; ++p) {
    rollout::PromptInput in;
    in.uid = uint64_t(1000 + p);
    for (int64_t t = 0; t < 32 + (p * 13) % 33; ++t) in.ids.push_back(int32_t((p * 7919 + t * 104729) % c.vocab_size));
    prompts.push_back(in);
  }
  rollout::SamplingOptions s;
  s.n = 4;
  s.temperature = 1.0;
  s.max_response_length = 64;
  s.seed = 1;

  rollout::EngineOptions o;
  o.max_num_seqs = 64;
  o.max_batch_tokens = 1024;
  rollout::GenerationEngine engine(model, tp, ops::Ctx{}, o);
  engine.generate(std::vector<rollout::PromptInput>(prompts.begin(), prompts.begin() + 1), s);  // warm-up
  auto t0 = Clock::now();
  const rollout::RolloutBatch batch = engine.generate(prompts, s);
  const double t_engine = seconds_since(t0);
  const rollout::GenerationStats st = engine.stats();  // (copied: later runs replace it)

  const std::vector<rollout::PromptInput> subset(prompts.begin(), prompts.begin() + naive_prompts);
  t0 = Clock::now();
  const rollout::RolloutBatch naive = rollout::reference_generate(model, ops::Ctx{}, subset, s);
  const double t_naive = seconds_since(t0);
  // Correctness beside speed: greedy responses of the subset, engine and
  // naive loop token for token. (Sampled ones are not compared here: this
  // random model's next-token distribution is nearly uniform over 8192 ids,
  // and the sampler walks them in probability order, which last-bit
  // differences between the cached and the full forward reshuffle.)
  rollout::SamplingOptions g = s;
  g.temperature = 0;
  g.n = 1;
  const rollout::RolloutBatch greedy_engine = engine.generate(subset, g);
  const rollout::RolloutBatch greedy_naive = rollout::reference_generate(model, ops::Ctx{}, subset, g);
  bool same = greedy_engine.response_tokens == greedy_naive.response_tokens;

  const double engine_tps = double(batch.total_response_tokens()) / t_engine;
  const double naive_tps = double(naive.total_response_tokens()) / t_naive;
  if (runtime.world_rank() == 0)
    std::printf(
        "{\"bench\":\"generate\",\"threads\":%d,\"config\":{\"hidden\":%lld,\"layers\":%lld,\"heads\":%lld,"
        "\"kv_heads\":%lld,\"intermediate\":%lld,\"vocab\":%lld},\"prompts\":%lld,\"n\":%lld,"
        "\"max_response_length\":%lld,\"response_tokens\":%lld,\"engine_s\":%.3f,\"engine_tokens_per_s\":%.0f,"
        "\"steps\":%lld,\"peak_batch\":%lld,\"prompt_positions\":%lld,\"block_copies\":%lld,\"kv_cache_mib\":%.2f,"
        "\"baseline_naive_tokens_per_s\":%.0f,\"naive_prompts\":%lld,\"greedy_same_as_naive\":%s,"
        "\"speedup_over_naive\":%.1f,\"target_speedup\":10}\n",
        omp_get_max_threads(), (long long)c.hidden_size, (long long)c.num_hidden_layers,
        (long long)c.num_attention_heads, (long long)c.num_key_value_heads, (long long)c.intermediate_size,
        (long long)c.vocab_size, (long long)num_prompts, (long long)s.n, (long long)s.max_response_length,
        (long long)batch.total_response_tokens(), t_engine, engine_tps, (long long)st.scheduler.steps,
        (long long)st.scheduler.peak_running, (long long)st.scheduler.prompt_positions,
        (long long)st.scheduler.block_copies, double(st.kv_cache_bytes) / 1048576.0, naive_tps,
        (long long)naive_prompts, same ? "true" : "false", engine_tps / naive_tps);
  return same ? 0 : 1;
}
