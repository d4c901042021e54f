// The engine's planning (sampling and engine options from the config, the
// KV pool's and a step's memory) and generate(), whose run is a
// GenerationRun (generation_run.h).
#include "dapo/rollout/engine.h"

#include <algorithm>

#include "dapo/core/carver.h"
#include "dapo/core/error.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/sampling.h"
#include "generation_run.h"
#include "step_buffers.h"
#include "step_staging.h"

namespace dapo::rollout {

SamplingOptions sampling_options(const Config& config, std::vector<int32_t> eos_ids, uint64_t step) {
  SamplingOptions s;
  s.n = config.rollout.n;
  s.temperature = config.rollout.temperature;
  s.top_p = config.rollout.top_p;
  s.top_k = config.rollout.top_k;
  s.max_response_length = config.rollout.max_response_length;
  s.seed = uint64_t(config.train.seed);
  s.step = step;
  s.eos_ids = std::move(eos_ids);
  return s;
}

SamplingOptions validation_sampling_options(const Config& config, std::vector<int32_t> eos_ids, uint64_t step) {
  SamplingOptions s = sampling_options(config, std::move(eos_ids), step);
  s.n = config.rollout.val_n;
  s.temperature = config.rollout.val_temperature;
  s.top_p = config.rollout.val_top_p;
  s.top_k = config.rollout.val_top_k;
  return s;
}

EngineOptions engine_options(const Config& config) {
  EngineOptions o;
  o.block_size = config.rollout.block_size;
  o.max_num_seqs = config.rollout.max_num_seqs;
  o.max_batch_tokens = config.rollout.max_num_batched_tokens;
  o.kv_cache_bytes = size_t(config.rollout.kv_cache_gib * 1024.0 * 1024.0 * 1024.0);
  o.kv_cache_memory_fraction = config.rollout.kv_cache_memory_fraction;
  o.spec_tokens = config.rollout.spec_tokens;
  o.spec_max_running = config.rollout.spec_max_running;
  return o;
}

int64_t engine_seats(const EngineOptions& options, int64_t sequences, int64_t n) {
  const int64_t seats =
      options.max_num_seqs > 0 ? options.max_num_seqs : std::clamp<int64_t>(sequences, 1, kAutoMaxNumSeqs);
  return std::max(seats, n);
}

int64_t engine_spec_tokens(const EngineOptions& options, bool on_gpu) {
  return options.spec_tokens >= 0 ? options.spec_tokens : (on_gpu ? 4 : 0);
}

int64_t engine_step_rows(const EngineOptions& options, int64_t seats, bool on_gpu) {
  const int64_t k = engine_spec_tokens(options, on_gpu);
  if (k == 0) return seats;
  return std::max(seats, std::min(seats, std::max<int64_t>(options.spec_max_running, 1)) * (1 + k));
}

int64_t kv_blocks_for_budget(const model::Qwen2Config& config, int64_t tp_size, int64_t block_size,
                             size_t budget_bytes, Device device) {
  DAPO_CHECK(block_size >= 1, "block_size ", block_size);
  if (model::kv_cache_bytes(config, tp_size, 1, block_size, device) > budget_bytes) return 0;
  // kv_cache_bytes grows with the block count: double, then bisect.
  int64_t lo = 1, hi = 2;
  while (hi < (int64_t(1) << 31) && model::kv_cache_bytes(config, tp_size, hi, block_size, device) <= budget_bytes) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (model::kv_cache_bytes(config, tp_size, mid, block_size, device) <= budget_bytes ? lo : hi) = mid;
  }
  return std::min<int64_t>(lo, INT32_MAX);
}

KvPoolSizes kv_pool_sizes(const model::Qwen2Config& config, int64_t tp_size, int64_t seqs, int64_t max_len,
                          int64_t block_size, bool graphs, Device device) {
  const int64_t blocks = (max_len + block_size - 1) / block_size, reserved = graphs ? 1 : 0;
  KvPoolSizes s;
  s.min = model::kv_cache_bytes(config, tp_size, blocks + reserved, block_size, device);
  s.requests = model::kv_cache_bytes(config, tp_size, seqs * (blocks + 1) + reserved, block_size, device);
  return s;
}

GenerationMemory generation_memory(const model::Qwen2Model::Plan& plan, int64_t max_seqs, int64_t max_tokens,
                                   int64_t max_len, int64_t block_size, Device device, int threads) {
  GenerationMemory m;
  const int64_t V = plan.dims.V, tp = plan.dims.tp, max_blocks = (max_len + block_size - 1) / block_size;
  m.activations = plan.cached_activation_bytes(max_tokens, max_seqs);
  // The CPU sampler's per-thread row copies; the GPU's per-part sums (the
  // sampler's, or the fused head's parts and tile summaries).
  const size_t sampling = device == Device::cpu ? size_t(threads) * 8 * size_t(V) + 2 * Arena::kAlign
                                                : std::max(ops::sample_tokens_gpu_scratch_bytes(max_seqs),
                                                           ops::lm_head_sample_scratch_bytes(max_seqs, V));
  // Under tp, sample_tokens_tp's per-row search state (tp_sampling.h).
  const size_t sharded = tp > 1 ? size_t(max_seqs) * (4352 + 24 * size_t(tp)) + (size_t(1) << 16) : 0;
  m.scratch = std::max(plan.scratch_bytes(max_tokens, max_len, max_seqs, threads), sampling + sharded);
  Carver count_rows(nullptr);  // the same carve generate() makes
  carve_step_rows(count_rows, max_seqs, plan.dims.vl);
  m.rows = count_rows.arena_bytes();
  m.staging = StepStaging::capacity_for(max_tokens, max_seqs, max_blocks, max_seqs, max_seqs);
  return m;
}

GenerationEngine::GenerationEngine(const model::Qwen2Model& model, const parallel::Comm& tp, const ops::Ctx& ctx,
                                   EngineOptions options)
    : model_(model), tp_(tp), ctx_(ctx), options_(options) {
  DAPO_CHECK(options_.block_size >= 1 && options_.max_num_seqs >= 0 && options_.max_batch_tokens >= 1,
             "EngineOptions: block_size ", options_.block_size, ", max_num_seqs ", options_.max_num_seqs,
             ", max_batch_tokens ", options_.max_batch_tokens);
  DAPO_CHECK(tp.size() == model.dims().tp, "GenerationEngine: a tp Comm of ", tp.size(), " ranks for a model of tp ",
             model.dims().tp);
}

RolloutBatch GenerationEngine::generate(std::span<const PromptInput> prompts, const SamplingOptions& sampling,
                                        const ProgressCallback& progress) {
  DAPO_CHECK(sampling.n >= 1 && sampling.temperature >= 0 && sampling.top_p > 0 && sampling.max_response_length >= 0,
             "SamplingOptions: n ", sampling.n, ", temperature ", sampling.temperature, ", top_p ", sampling.top_p,
             ", max_response_length ", sampling.max_response_length);
  GenerationRun run(model_, tp_, ctx_, options_, prompts, sampling, stats_);
  while (!run.done()) {
    run.run_step();
    if (progress) run.report_progress(progress);
  }
  return run.finish();
}

}  // namespace dapo::rollout
