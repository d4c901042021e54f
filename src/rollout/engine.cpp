// The engine loop: schedule a step, run its copy-on-writes and its forward
// over the paged cache, sample the rows that need a token, hand them back to
// the scheduler; with the memory of one generate() planned up front.
#include "dapo/rollout/engine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>

#include "dapo/core/arena.h"
#include "dapo/core/carver.h"
#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/ops/kv_copy.h"
#include "dapo/ops/sampling.h"

namespace dapo::rollout {
namespace {

// The per-step rows of generate(): the logits of the step (B, V) and, per
// sampled row (R), the logits row it samples from (rows of a prompt's n
// samples share one), the sampled token, its logprob and its random-stream
// key. B and R are at most max_seqs. Carved from c's arena,
// or only counted when c has none: generate() sizes its arena by counting.
struct StepRows {
  float* logits;
  int32_t* logit_rows;
  int32_t* tokens;
  float* logprobs;
  int64_t* streams;
  int64_t* counters;
};

StepRows carve_step_rows(Carver& c, int64_t max_seqs, int64_t V) {
  StepRows r;
  r.logits = c.alloc_array<float>(size_t(max_seqs * V));
  r.logit_rows = c.alloc_array<int32_t>(size_t(max_seqs));
  r.tokens = c.alloc_array<int32_t>(size_t(max_seqs));
  r.logprobs = c.alloc_array<float>(size_t(max_seqs));
  r.streams = c.alloc_array<int64_t>(size_t(max_seqs));
  r.counters = c.alloc_array<int64_t>(size_t(max_seqs));
  return r;
}

size_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(4) << 30;
}

// The step's copy-on-writes, in order, group by group (copy_groups).
void run_copies(const ops::Ctx& ctx, const model::KvCache& cache, const std::vector<BlockCopy>& copies,
                std::vector<int32_t>& src, std::vector<int32_t>& dst) {
  size_t begin = 0;
  for (const size_t end : copy_groups(copies)) {
    src.clear();
    dst.clear();
    for (size_t i = begin; i < end; ++i) {
      src.push_back(copies[i].src);
      dst.push_back(copies[i].dst);
    }
    const int64_t m = int64_t(src.size());
    for (size_t l = 0; l < cache.k.size(); ++l)
      ops::kv_block_copy(ctx, cache.k[l], cache.v[l], tensor_i32(src.data(), {m}), tensor_i32(dst.data(), {m}));
    begin = end;
  }
}

// The step's metadata for forward_cached, rebuilt on the host every step.
struct StepBuffers {
  std::vector<int32_t> tokens, positions, cu_seqlens_q, last_rows, slot_mapping, block_table, context_lens;
  int64_t max_blocks = 0;

  void build(const StepPlan& plan, const Scheduler& sched, int64_t block_size) {
    tokens.clear();
    positions.clear();
    slot_mapping.clear();
    last_rows.clear();
    context_lens.clear();
    cu_seqlens_q.assign(1, 0);
    max_blocks = 1;
    for (const ScheduledChunk& c : plan.chunks)
      max_blocks = std::max<int64_t>(max_blocks, int64_t(sched.table(c.seq).size()));
    block_table.assign(plan.chunks.size() * size_t(max_blocks), 0);
    for (size_t b = 0; b < plan.chunks.size(); ++b) {
      const ScheduledChunk& c = plan.chunks[b];
      const BlockTable& table = sched.table(c.seq);
      for (int64_t p = c.begin; p < c.begin + c.count; ++p) {
        tokens.push_back(sched.token_at(c.seq, p));
        positions.push_back(int32_t(p));
        slot_mapping.push_back(int32_t(table[size_t(p / block_size)] * block_size + p % block_size));
      }
      cu_seqlens_q.push_back(int32_t(tokens.size()));
      last_rows.push_back(int32_t(tokens.size()) - 1);
      context_lens.push_back(int32_t(c.begin + c.count));
      std::copy(table.begin(), table.end(), block_table.begin() + std::ptrdiff_t(b * size_t(max_blocks)));
    }
  }

  model::CachedBatch view() {
    const int64_t N = int64_t(tokens.size()), B = int64_t(last_rows.size());
    return {tensor_i32(tokens.data(), {N}),          tensor_i32(positions.data(), {N}),
            tensor_i32(cu_seqlens_q.data(), {B + 1}), tensor_i32(last_rows.data(), {B}),
            tensor_i32(slot_mapping.data(), {N}),    tensor_i32(block_table.data(), {B, max_blocks}),
            tensor_i32(context_lens.data(), {B})};
  }
};

uint64_t tokens_hash(const int32_t* tokens, size_t n) {
  uint64_t h = kStreamHashInit;
  for (size_t i = 0; i < n; ++i) h = stream_combine(h, uint64_t(uint32_t(tokens[i])));
  return h;
}

}  // namespace

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
  return o;
}

int64_t kv_blocks_for_budget(const model::Qwen2Config& config, int64_t tp_size, int64_t block_size,
                             size_t budget_bytes) {
  DAPO_CHECK(block_size >= 1, "block_size ", block_size);
  if (model::kv_cache_bytes(config, tp_size, 1, block_size) > budget_bytes) return 0;
  // kv_cache_bytes grows with the block count: double, then bisect.
  int64_t lo = 1, hi = 2;
  while (hi < (int64_t(1) << 31) && model::kv_cache_bytes(config, tp_size, hi, block_size) <= budget_bytes) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (model::kv_cache_bytes(config, tp_size, mid, block_size) <= budget_bytes ? lo : hi) = mid;
  }
  return std::min<int64_t>(lo, INT32_MAX);
}

GenerationEngine::GenerationEngine(const model::Qwen2Model& model, const parallel::Comm& tp, const ops::Ctx& ctx,
                                   EngineOptions options)
    : model_(model), tp_(tp), ctx_(ctx), options_(options) {
  DAPO_CHECK(options_.block_size >= 1 && options_.max_num_seqs >= 1 && options_.max_batch_tokens >= 1,
             "EngineOptions: block_size ", options_.block_size, ", max_num_seqs ", options_.max_num_seqs,
             ", max_batch_tokens ", options_.max_batch_tokens);
  DAPO_CHECK(tp.size() == model.dims().tp, "GenerationEngine: a tp Comm of ", tp.size(), " ranks for a model of tp ",
             model.dims().tp);
}

RolloutBatch GenerationEngine::generate(std::span<const PromptInput> prompts, const SamplingOptions& sampling,
                                        const ProgressCallback& progress) {
  DAPO_CHECK(ctx_.backend == ops::Backend::cpu,
             "GenerationEngine: the CUDA path (device staging of the step metadata) is not written yet");
  DAPO_CHECK(sampling.n >= 1 && sampling.temperature >= 0 && sampling.top_p > 0 && sampling.max_response_length >= 0,
             "SamplingOptions: n ", sampling.n, ", temperature ", sampling.temperature, ", top_p ", sampling.top_p,
             ", max_response_length ", sampling.max_response_length);
  const auto start = Clock::now();
  const model::Qwen2Config& config = model_.config();
  const int64_t V = model_.dims().V, tp_size = model_.dims().tp, bs = options_.block_size;
  const Device device = ops::backend_device(ctx_.backend);

  SchedulerLimits limits;
  limits.n = sampling.n;
  limits.max_response_length = sampling.max_response_length;
  limits.eos_ids = sampling.eos_ids;
  limits.max_num_seqs = std::max(options_.max_num_seqs, sampling.n);
  limits.max_batch_tokens = std::max(options_.max_batch_tokens, limits.max_num_seqs);
  const int64_t max_seqs = limits.max_num_seqs, max_tokens = limits.max_batch_tokens;

  int64_t longest_prompt = 1;
  for (const PromptInput& p : prompts) {
    DAPO_CHECK(!p.ids.empty(), "GenerationEngine: empty prompt (uid ", p.uid, ")");
    for (const int32_t id : p.ids)
      DAPO_CHECK(id >= 0 && id < V, "GenerationEngine: prompt token ", id, " outside [0, ", V, ")");
    longest_prompt = std::max<int64_t>(longest_prompt, int64_t(p.ids.size()));
  }
  const int64_t max_len = longest_prompt + sampling.max_response_length;

  // ---- the KV pool from the budget ----
  size_t budget = options_.kv_cache_bytes;
  if (budget == 0) {
    const int64_t seqs = std::min<int64_t>(max_seqs, std::max<int64_t>(1, int64_t(prompts.size()) * sampling.n));
    const int64_t blocks = seqs * ((max_len + bs - 1) / bs + 1);
    budget = std::min(model::kv_cache_bytes(config, tp_size, blocks, bs), host_memory_bytes() / 4);
    budget = std::max(budget, model::kv_cache_bytes(config, tp_size, (max_len + bs - 1) / bs, bs));
  }
  const int64_t num_blocks = kv_blocks_for_budget(config, tp_size, bs, budget);
  if (num_blocks < 1)
    throw UserError(cat("rollout: a KV-cache budget of ", budget, " bytes cannot hold one block of ", bs,
                        " positions (", model::kv_cache_bytes(config, tp_size, 1, bs), " bytes)"));
  BlockManager blocks(num_blocks, bs);
  Scheduler sched(blocks, limits);
  for (const PromptInput& p : prompts) sched.add_prompt(p.uid, p.ids);

  stats_ = GenerationStats{};
  stats_.num_blocks = num_blocks;
  stats_.block_size = bs;
  stats_.kv_cache_bytes = model::kv_cache_bytes(config, tp_size, num_blocks, bs);

  // ---- the memory of one step ----
  const int threads = omp_get_max_threads();
  const int64_t context = std::min(max_len, num_blocks * bs);
  Arena kv_arena(stats_.kv_cache_bytes, device, "kv-cache");
  const model::KvCache cache = model::allocate_kv_cache(kv_arena, config, tp_size, num_blocks, bs);
  Arena act(model_.cached_activation_bytes(max_tokens, max_seqs), device, "generation-activations");
  const size_t sampling_scratch = size_t(threads) * 8 * size_t(V) + 2 * Arena::kAlign;
  Arena scratch(std::max(model_.scratch_bytes(max_tokens, context, max_seqs, threads), sampling_scratch), device,
                "generation-scratch");
  ops::Ctx ctx = ctx_;
  ctx.scratch = &scratch;
  // The step's rows, in an arena sized by a counting pass of the same carve.
  Carver count_rows(nullptr);
  carve_step_rows(count_rows, max_seqs, V);
  Arena rows(count_rows.arena_bytes(), device, "generation-rows");
  Carver carve_rows(&rows);
  const auto [logits, logit_rows, tokens, logprobs, streams, counters] = carve_step_rows(carve_rows, max_seqs, V);
  const ops::SamplingParams params{sampling.seed, float(sampling.temperature), float(sampling.top_p),
                                   int(std::min<int64_t>(std::max<int64_t>(sampling.top_k, 0), INT32_MAX))};

  StepBuffers step;
  std::vector<int32_t> copy_src, copy_dst;
  std::vector<uint64_t> uids;
  for (const PromptInput& p : prompts) uids.push_back(p.uid);
  while (!sched.done()) {
    const StepPlan& plan = sched.schedule();
    run_copies(ctx, cache, plan.copies, copy_src, copy_dst);
    step.build(plan, sched, bs);
    const int64_t B = int64_t(plan.chunks.size()), R = int64_t(plan.rows.size());
    DAPO_CHECK(B <= max_seqs && int64_t(step.tokens.size()) <= max_tokens, "step of ", B, " sequences and ",
               step.tokens.size(), " tokens over the planned ", max_seqs, " and ", max_tokens);
    model_.forward_cached(ctx, act, cache, step.view(), tensor_f32(logits, {B, V}));
    for (int64_t r = 0; r < R; ++r) {
      const SampleRow& row = plan.rows[size_t(r)];
      logit_rows[r] = int32_t(row.chunk);
      streams[r] = int64_t(sample_stream(sampling.step, uids[size_t(row.prompt)], row.sample));
      counters[r] = row.position;
    }
    if (R > 0)
      ops::sample_tokens(ctx, tensor_i32(tokens, {R}), tensor_f32(logprobs, {R}), tensor_f32(logits, {B, V}),
                         tensor_i32(logit_rows, {R}), tensor_i64(streams, {R}), tensor_i64(counters, {R}), params);
    if (options_.check_tp_agreement && tp_.size() > 1) {
      const int64_t h = int64_t(tokens_hash(tokens, size_t(R)) >> 2);
      int64_t both[2] = {h, -h};
      tp_.all_reduce_i64(both, parallel::ReduceOp::max);
      DAPO_CHECK(both[0] == h && both[1] == -h, "GenerationEngine: tp ranks sampled different tokens in step ",
                 sched.stats().steps, " (their logits differ)");
    }
    sched.commit(std::span<const int32_t>(tokens, size_t(R)), std::span<const float>(logprobs, size_t(R)));
    if (progress) {
      GenerationProgress p;
      p.step = sched.stats().steps;
      p.running = sched.num_running();
      p.waiting = sched.num_waiting();
      p.finished = sched.num_finished();
      p.total = sched.num_responses();
      p.generated_tokens = sched.stats().sampled_tokens;
      p.elapsed_s = seconds_since(start);
      p.tokens_per_s = p.elapsed_s > 0 ? double(p.generated_tokens) / p.elapsed_s : 0.0;
      progress(p);
    }
  }
  stats_.scheduler = sched.stats();
  stats_.seconds = seconds_since(start);
  stats_.tokens_per_s = stats_.seconds > 0 ? double(stats_.scheduler.sampled_tokens) / stats_.seconds : 0.0;
  return sched.result();
}

}  // namespace dapo::rollout
