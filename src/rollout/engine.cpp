// The engine loop: schedule a step, run its copy-on-writes and its forward
// over the paged cache, sample the rows that need a token, hand them back to
// the scheduler; with the memory of one generate() planned up front.
#include "dapo/rollout/engine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>

#include "dapo/core/arena.h"
#include "dapo/core/carver.h"
#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/ops/kv_copy.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/step_io.h"
#include "decode_graphs.h"
#include "dapo/rollout/tp_sampling.h"
#include "step_staging.h"

namespace dapo::rollout {
namespace {

// A prefill step of at least this many new positions keeps the GPU busy
// longer than a decode graph's capture takes on the host (H100, 0.5B: a
// step of 8,192 positions ~13 ms, a capture ~3.5 ms): the engine captures
// one while it waits (capture_ahead).
constexpr int64_t kCaptureAheadTokens = 4096;

// The per-step rows of generate(), on the backend's device: the logits of
// the step in this rank's vocabulary shard (B, V / tp), and the sampled tokens (R) i32 followed by their
// log-probs (R) f32 in one block (`sampled`, 2 * max_seqs words), so that
// one copy brings both back to the host. B and R are at most max_seqs.
// Carved from c's arena, or only counted when c has none: generate() sizes
// its arena by counting.
struct StepRows {
  float* logits;
  int32_t* sampled;
};

StepRows carve_step_rows(Carver& c, int64_t max_seqs, int64_t V) {
  StepRows r;
  r.logits = c.alloc_array<float>(size_t(max_seqs * V));
  r.sampled = c.alloc_array<int32_t>(size_t(2 * max_seqs));
  return r;
}

// The memory this process may use: the machine's, or less under a cgroup
// limit (Slurm confines jobs with cgroups; cgroup v2's memory.max, v1's
// memory.limit_in_bytes; "max" or a huge v1 value: no limit).
size_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  size_t bytes = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(4) << 30;
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    unsigned long long limit = 0;
    if (in >> limit && limit > 0 && limit < bytes) bytes = size_t(limit);
  }
  return bytes;
}

// The step's metadata for forward_cached, rebuilt on the host every step,
// then packed into the staging block (one upload per step).
struct StepBuffers {
  PaddedDecode arrays;  // the forward's arrays (unpadded)
  std::vector<int32_t>& tokens = arrays.tokens;
  std::vector<int32_t>& positions = arrays.positions;
  std::vector<int32_t>& cu_seqlens_q = arrays.cu_seqlens_q;
  std::vector<int32_t>& last_rows = arrays.last_rows;
  std::vector<int32_t>& slot_mapping = arrays.slot_mapping;
  std::vector<int32_t>& block_table = arrays.block_table;
  std::vector<int32_t>& context_lens = arrays.context_lens;
  std::vector<int32_t> copy_src, copy_dst, logit_rows;
  std::vector<int64_t> streams, counters;
  std::vector<size_t> copy_ends;  // copy_groups(plan.copies)
  int64_t max_blocks = 0, max_context_len = 0;
  int64_t fresh_max_seqlen = 0;   // > 0: every chunk starts at position 0 (model::CachedBatch)
  bool rows_are_chunks = true;    // row r samples from logits row r, for every r

  // fed: a plan made ahead (Scheduler::plan_ahead), whose input tokens are
  // not known on the host yet; their slots hold 0 until the engine copies
  // them in on the device.
  void build(const StepPlan& plan, const Scheduler& sched, int64_t block_size, std::span<const uint64_t> uids,
             uint64_t step, bool fed) {
    tokens.clear();
    positions.clear();
    slot_mapping.clear();
    last_rows.clear();
    context_lens.clear();
    cu_seqlens_q.assign(1, 0);
    max_blocks = 1;
    max_context_len = 1;
    fresh_max_seqlen = 0;
    bool fresh = true;
    for (const ScheduledChunk& c : plan.chunks) {
      max_blocks = std::max<int64_t>(max_blocks, int64_t(sched.table(c.seq).size()));
      fresh = fresh && c.begin == 0;
      fresh_max_seqlen = std::max(fresh_max_seqlen, c.count);
    }
    if (!fresh) fresh_max_seqlen = 0;
    block_table.assign(plan.chunks.size() * size_t(max_blocks), 0);
    for (size_t b = 0; b < plan.chunks.size(); ++b) {
      const ScheduledChunk& c = plan.chunks[b];
      const BlockTable& table = sched.table(c.seq);
      for (int64_t p = c.begin; p < c.begin + c.count; ++p) {
        tokens.push_back(fed ? 0 : sched.token_at(c.seq, p));
        positions.push_back(int32_t(p));
        slot_mapping.push_back(int32_t(table[size_t(p / block_size)] * block_size + p % block_size));
      }
      cu_seqlens_q.push_back(int32_t(tokens.size()));
      last_rows.push_back(int32_t(tokens.size()) - 1);
      context_lens.push_back(int32_t(c.begin + c.count));
      max_context_len = std::max(max_context_len, c.begin + c.count);
      std::copy(table.begin(), table.end(), block_table.begin() + std::ptrdiff_t(b * size_t(max_blocks)));
    }
    copy_src.clear();
    copy_dst.clear();
    for (const BlockCopy& c : plan.copies) {
      copy_src.push_back(c.src);
      copy_dst.push_back(c.dst);
    }
    copy_ends = copy_groups(plan.copies);
    logit_rows.clear();
    streams.clear();
    counters.clear();
    rows_are_chunks = plan.rows.size() == plan.chunks.size();
    for (size_t r = 0; r < plan.rows.size(); ++r) {
      const SampleRow& row = plan.rows[r];
      logit_rows.push_back(int32_t(row.chunk));
      rows_are_chunks = rows_are_chunks && row.chunk == int64_t(r);
      streams.push_back(int64_t(sample_stream(step, uids[size_t(row.prompt)], row.sample)));
      counters.push_back(row.position);
    }
  }
};

// The staged views of one step.
struct StepViews {
  model::CachedBatch batch;
  Tensor copy_src, copy_dst, logit_rows, streams, counters;
};

// The forward's arrays first, then the sampled rows' keys: for a padded
// decode step their sizes, and so their device addresses, are the same at
// every replay of its graph. `rows` >= R: the keys are padded with zeros to
// that many rows (a decode graph samples its padding rows too). Packs only:
// the caller uploads (StepStaging::upload) or a graph's step_in moves them.
StepViews stage(StepStaging& staging, const PaddedDecode& a, int64_t width, int64_t max_context_len, StepBuffers& s,
                int64_t rows) {
  const int64_t N = int64_t(a.tokens.size()), B = int64_t(a.last_rows.size());
  const int64_t M = int64_t(s.copy_src.size()), R = int64_t(s.logit_rows.size());
  DAPO_CHECK(rows >= R, "stage: ", R, " sampled rows padded to ", rows);
  s.streams.resize(size_t(rows), 0);
  s.counters.resize(size_t(rows), 0);
  staging.begin();
  StepViews v;
  v.batch.tokens = staging.add_i32(a.tokens, {N});
  v.batch.positions = staging.add_i32(a.positions, {N});
  v.batch.cu_seqlens_q = staging.add_i32(a.cu_seqlens_q, {B + 1});
  v.batch.last_rows = staging.add_i32(a.last_rows, {B});
  v.batch.slot_mapping = staging.add_i32(a.slot_mapping, {N});
  v.batch.block_table = staging.add_i32(a.block_table, {B, width});
  v.batch.context_lens = staging.add_i32(a.context_lens, {B});
  v.batch.max_context_len = max_context_len;
  v.streams = staging.add_i64(s.streams, {rows});
  v.counters = staging.add_i64(s.counters, {rows});
  v.logit_rows = staging.add_i32(s.logit_rows, {R});
  v.copy_src = staging.add_i32(s.copy_src, {M});
  v.copy_dst = staging.add_i32(s.copy_dst, {M});
  return v;
}

// The step's copy-on-writes, in order, group by group (copy_groups): the
// copies of one group are independent, later groups may read their blocks.
void run_copies(const ops::Ctx& ctx, const model::KvCache& cache, const StepBuffers& s, const StepViews& v) {
  size_t begin = 0;
  for (const size_t end : s.copy_ends) {
    const int64_t m = int64_t(end - begin);
    const Tensor src(static_cast<int32_t*>(v.copy_src.data) + begin, DType::i32, {m}, v.copy_src.device);
    const Tensor dst(static_cast<int32_t*>(v.copy_dst.data) + begin, DType::i32, {m}, v.copy_dst.device);
    for (size_t l = 0; l < cache.k.size(); ++l) ops::kv_block_copy(ctx, cache.k[l], cache.v[l], src, dst);
    begin = end;
  }
}

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
  o.kv_cache_memory_fraction = config.rollout.kv_cache_memory_fraction;
  return o;
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
  DAPO_CHECK(options_.block_size >= 1 && options_.max_num_seqs >= 1 && options_.max_batch_tokens >= 1,
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
  const auto start = Clock::now();
  const model::Qwen2Config& config = model_.config();
  const int64_t V = model_.dims().V, tp_size = model_.dims().tp, bs = options_.block_size;
  const Device device = ops::backend_device(ctx_.backend);
  const bool on_gpu = ctx_.backend == ops::Backend::cuda;

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
  const int64_t max_blocks = (max_len + bs - 1) / bs;

  // ---- the memory of one step, before the pool, which takes what is left ----
  const GenerationMemory mem =
      generation_memory(model_.plan(), max_seqs, max_tokens, max_len, bs, device, on_gpu ? 1 : omp_get_max_threads());
  Arena act(mem.activations, device, "generation-activations");
  Arena scratch(mem.scratch, device, "generation-scratch");
  ops::Ctx ctx = ctx_;
  ctx.scratch = &scratch;
  Arena rows(mem.rows, device, "generation-rows");
  Carver carve_rows(&rows);
  // Logits rows of this rank's vocabulary shard (the whole vocabulary at tp = 1).
  const int64_t VL = model_.dims().vl;
  const auto [logits, sampled] = carve_step_rows(carve_rows, max_seqs, VL);
  StepStaging staging(mem.staging, ctx);
  // Two read-back slots: a step's tokens land in one while the host reads
  // the previous step's from the other (launch-ahead). A slot mirrors
  // `sampled` (max_seqs tokens, then max_seqs log-probs), so that one copy
  // of its first max_seqs + R words brings both back.
  Arena readback(2 * (2 * size_t(max_seqs) * sizeof(int32_t) + Arena::kAlign), Arena::Pinned{},
                 "sampled-tokens-host");
  int32_t* host_tokens[2];
  float* host_logprobs[2];
  for (int i = 0; i < 2; ++i) {
    host_tokens[i] = readback.alloc_array<int32_t>(2 * size_t(max_seqs));
    host_logprobs[i] = reinterpret_cast<float*>(host_tokens[i] + max_seqs);
  }
  ops::StreamEvent done_event[2] = {ops::StreamEvent(ctx), ops::StreamEvent(ctx)};

  // ---- the KV pool from the budget ----
  // Decode steps replay CUDA graphs (not while a profiler brackets each
  // op), whose padding rows read one reserved block of the pool.
  const bool graphs = on_gpu && options_.cuda_graphs && ctx_.profiler == nullptr;
  const bool launch_ahead = options_.launch_ahead.value_or(on_gpu);
  const int64_t reserved = graphs ? 1 : 0;
  size_t budget = options_.kv_cache_bytes;
  if (budget > 0) {
    // A budget this process cannot have fails in the allocator, far from the key.
    const size_t have = on_gpu ? device_memory_free() : host_memory_bytes();
    if (budget > have)
      throw UserError(cat("rollout.kv_cache_gib = ", double(budget) / double(size_t(1) << 30), " GiB is more than ",
                          on_gpu ? "this GPU's free memory" : "this process may use", " (",
                          double(have) / double(size_t(1) << 30),
                          " GiB); lower it, or set 0 to size the pool from the requests"));
  }
  if (budget == 0) {
    const int64_t seqs = std::min<int64_t>(max_seqs, std::max<int64_t>(1, int64_t(prompts.size()) * sampling.n));
    const KvPoolSizes sizes = kv_pool_sizes(config, tp_size, seqs, max_len, bs, graphs, device);
    const double fraction = std::clamp(options_.kv_cache_memory_fraction, 0.0, 1.0);
    const size_t cap = on_gpu ? size_t(double(device_memory_free()) * fraction) : host_memory_bytes() / 4;
    // At least one full sequence; if the device cannot give that, the
    // allocation below says so.
    budget = std::max(sizes.min, std::min(sizes.requests, cap));
  }
  const int64_t pool_blocks = kv_blocks_for_budget(config, tp_size, bs, budget, device);
  const int64_t num_blocks = pool_blocks - reserved;  // what the scheduler may use
  if (num_blocks < 1)
    throw UserError(cat("rollout: a KV-cache budget of ", budget, " bytes cannot hold one block of ", bs,
                        " positions (", model::kv_cache_bytes(config, tp_size, 1, bs, device), " bytes)"));
  BlockManager blocks(num_blocks, bs);
  Scheduler sched(blocks, limits);
  for (const PromptInput& p : prompts) sched.add_prompt(p.uid, p.ids);

  stats_ = GenerationStats{};
  stats_.num_blocks = num_blocks;
  stats_.block_size = bs;
  stats_.kv_cache_bytes = model::kv_cache_bytes(config, tp_size, pool_blocks, bs, device);
  Arena kv_arena(stats_.kv_cache_bytes, device, "kv-cache");
  const model::KvCache cache = model::allocate_kv_cache(kv_arena, config, tp_size, pool_blocks, bs);
  const int32_t pad_block = int32_t(num_blocks);  // the last block: zeros, read by padding rows only
  if (graphs)
    for (const std::vector<Tensor>* pool : {&cache.k, &cache.v})
      for (const Tensor& t : *pool) {
        const int64_t per_block = t.numel() / pool_blocks;
        ops::fill(ctx, Tensor(static_cast<char*>(t.data) + size_t(pad_block * per_block) * dtype_size(t.dtype),
                              t.dtype, {per_block}, t.device),
                  0.0);
      }
  DecodeGraphs decode_graphs;
  PaddedDecode padded;
  const ops::SamplingParams params{sampling.seed, float(sampling.temperature), float(sampling.top_p),
                                   int(std::min<int64_t>(std::max<int64_t>(sampling.top_k, 0), INT32_MAX))};

  StepBuffers step;
  std::vector<uint64_t> uids;
  for (const PromptInput& p : prompts) uids.push_back(p.uid);

  // Rows map to logits rows one for one, except where a prompt whose
  // prefill ends here is sampled n times from its one row.
  // Untruncated sampling at tp = 1 on the GPU: the head fused with the draw
  // (ops/lm_head_sample.h), no logits in memory. Otherwise the logits, then
  // the sampler.
  const bool fused_head = options_.fused_head && model_.cached_sample_preferred(ctx, params);
  stats_.fused_head = fused_head;
  auto forward_sample = [&](int64_t rows, const Tensor& step_logits, const Tensor& rows_of, const StepViews& v) {
    const Tensor tokens(sampled, DType::i32, {rows}, device);
    const Tensor logprobs(sampled + max_seqs, DType::f32, {rows}, device);
    const Tensor streams(v.streams.data, DType::i64, {rows}, device);
    const Tensor counters(v.counters.data, DType::i64, {rows}, device);
    if (fused_head) {
      model_.forward_cached_sample(ctx, act, cache, v.batch, {tokens, logprobs, rows_of, streams, counters, params});
      return;
    }
    model_.forward_cached(ctx, act, cache, v.batch, step_logits);
    if (rows == 0) return;
    if (tp_size > 1)
      sample_tokens_tp(ctx, tp_, tokens, logprobs, step_logits, rows_of, streams, counters, params,
                       model_.dims().vocab_start);
    else
      ops::sample_tokens(ctx, tokens, logprobs, step_logits, rows_of, streams, counters, params);
  };
  // The one read-back of a step (tokens, the rows between, log-probs) into
  // slot `slot`; it also tells the host that the step's staged metadata was
  // consumed.
  auto readback_args = [&](int slot, int64_t rows) {
    return ops::StepOut{Tensor(host_tokens[slot], DType::i32, {max_seqs + rows}),
                        Tensor(sampled, DType::i32, {max_seqs + rows}, device), 2 * max_seqs};
  };
  // The decode graph of bucket (Bp, Cp) over the staged views v: the
  // metadata's way in, the forward, the sampling of every padded row, the
  // samples' way out (ops/step_io.h). A step is then one launch.
  auto capture_decode = [&](int64_t Bp, int64_t Cp, const StepViews& v, const ops::StepIn& in,
                            const ops::StepOut& out) -> ops::CapturedGraph& {
    const auto t_capture = Clock::now();
    const Tensor padded_logits(logits, DType::f32, {Bp, VL}, device);
    ops::CapturedGraph& graph = decode_graphs.add(Bp, Cp, ops::CapturedGraph::capture(ctx, [&] {
      ops::step_in(ctx, in);
      forward_sample(Bp, padded_logits, Tensor{}, v);
      ops::step_out(ctx, out);
    }));
    stats_.graph_capture_seconds += seconds_since(t_capture);
    return graph;
  };
  // While a long prefill step runs, the host has nothing to do but wait: it
  // captures a decode graph the steps after the prefills will need (the
  // batch of every response still to run, at the first two context buckets
  // past the longest prompt), one per wait, instead of between two steps
  // while the GPU idles. Its views come from staging a step of padding rows
  // of the same shape (the same sizes give the same device addresses) into
  // the host block the running step does not use: the step before it, its
  // last user, has completed.
  const int64_t context_cap = max_blocks * bs;
  auto capture_ahead = [&] {
    if (sampling.max_response_length < 2) return;  // no decode steps
    const int64_t Bp =
        batch_bucket(std::clamp<int64_t>(sched.num_responses() - sched.num_finished(), 1, max_seqs), max_seqs);
    const int64_t first = context_bucket(longest_prompt + 1, context_cap);
    for (const int64_t Cp : {first, first < context_cap ? context_bucket(first + 1, context_cap) : first}) {
      if (decode_graphs.has(Bp, Cp)) continue;
      const int64_t W = (Cp + bs - 1) / bs;
      PaddedDecode pad;
      pad_decode(pad, {}, {}, {}, {}, 0, {}, Bp, W, pad_block);
      StepBuffers none;
      const StepViews v = stage(staging, pad, W, Cp, none, Bp);
      capture_decode(Bp, Cp, v,
                     ops::StepIn{staging.packed_host(), staging.packed_device(), v.batch.tokens,
                                 Tensor(sampled, DType::i32, {0}, device), 0, staging.capacity_words()},
                     readback_args(0, Bp));
      ++stats_.graphs_captured_ahead;
      return;
    }
  };

  // A step on the stream: its copy-on-writes, forward and sampling, the
  // read-back of its tokens into slot `slot`, and done_event[slot] after it.
  // `fed`: a plan made ahead, whose input token at row r is the previous
  // step's sample r, copied on the device (`sampled` still holds it).
  struct Launched {
    int64_t R = 0;
    int64_t tokens = 0;  // new positions
    int slot = 0;
    bool has_prefill = false;
  };
  auto launch = [&](const StepPlan& plan, bool fed, int slot) {
    step.build(plan, sched, bs, uids, sampling.step, fed);
    Launched l;
    l.slot = slot;
    l.has_prefill = int64_t(step.tokens.size()) > int64_t(plan.chunks.size());
    l.tokens = int64_t(step.tokens.size());
    const int64_t B = int64_t(plan.chunks.size()), R = int64_t(plan.rows.size());
    l.R = R;
    DAPO_CHECK(B <= max_seqs && int64_t(step.tokens.size()) <= max_tokens && R <= max_seqs, "step of ", B,
               " sequences, ", step.tokens.size(), " tokens and ", R, " rows over the planned ", max_seqs, " and ",
               max_tokens);
    // A pure decode step replays the graph of its (batch, context) bucket,
    // captured the first time the bucket comes up; anything else runs
    // eagerly. The graph holds the whole step: the metadata's way in (and
    // the fed tokens), the forward, the sampling of every padded row and
    // the samples' way out (ops/step_io.h), so a step is one launch.
    const bool replay = graphs && !l.has_prefill && step.rows_are_chunks && R == B;
    int64_t Bp = B, Cp = step.max_context_len, W = step.max_blocks;  // rows, context, table width
    DecodeGraphs::Pick pick;
    if (replay) {
      Cp = context_bucket(step.max_context_len, context_cap);
      W = (Cp + bs - 1) / bs;
      pick = decode_graphs.pick(batch_bucket(B, max_seqs), Cp);
      Bp = pick.rows;
      pad_decode(padded, step.tokens, step.positions, step.slot_mapping, step.block_table, step.max_blocks,
                 step.context_lens, Bp, W, pad_block);
    }
    StepViews v = replay ? stage(staging, padded, W, Cp, step, Bp) : stage(staging, step.arrays, W, Cp, step, R);
    if (replay) {
      const ops::StepIn in{staging.packed_host(), staging.packed_device(), v.batch.tokens,
                           Tensor(sampled, DType::i32, {B}, device), fed ? B : 0, staging.capacity_words()};
      const ops::StepOut out = readback_args(slot, Bp);
      // Copy-on-writes read their block lists before the graph: upload them
      // (the graph's step_in then moves the same bytes again).
      if (!step.copy_src.empty()) {
        staging.upload();
        run_copies(ctx, cache, step, v);
      }
      ops::CapturedGraph* graph = pick.graph != nullptr ? pick.graph : &capture_decode(Bp, Cp, v, in, out);
      ops::set_step_in(*graph, in);
      ops::set_step_out(*graph, out);
      graph->launch(ctx);
    } else {
      staging.upload();
      if (fed)
        ops::copy(ctx, Tensor(v.batch.tokens.data, DType::i32, {B}, device), Tensor(sampled, DType::i32, {B}, device));
      // GPU prefill steps of fresh prompts take the flash attention kernels;
      // the CPU backend (the reference) keeps one attention path for all steps.
      if (on_gpu) v.batch.fresh_max_seqlen = step.fresh_max_seqlen;
      run_copies(ctx, cache, step, v);
      const Tensor step_logits(logits, DType::f32, {B, VL}, device);
      forward_sample(R, step_logits, step.rows_are_chunks ? Tensor{} : v.logit_rows, v);
      if (R > 0) {
        const ops::StepOut out = readback_args(slot, R);
        ops::copy(ctx, out.host, out.device);
      }
    }
    done_event[slot].record(ctx);
    return l;
  };

  std::optional<Launched> running;  // launched, not committed
  int slot = 0;
  while (!sched.done() || running) {
    const auto t_iter = Clock::now();
    double host = 0;
    if (!running) {
      const StepPlan& plan = sched.schedule();
      host += seconds_since(t_iter);
      running = launch(plan, false, slot);
      slot = 1 - slot;
    }
    // While this step runs: the next one, if it is sure to decode the same
    // sequences (a sequence that ends now computes one dropped position).
    std::optional<Launched> next;
    if (launch_ahead && !running->has_prefill && sched.can_plan_ahead()) {
      const auto t_ahead = Clock::now();
      const StepPlan& plan = sched.plan_ahead();
      host += seconds_since(t_ahead);
      next = launch(plan, true, slot);
      slot = 1 - slot;
      ++stats_.steps_ahead;
    }
    const auto t_wait = Clock::now();
    if (graphs && options_.capture_graphs_ahead && running->has_prefill && running->tokens >= kCaptureAheadTokens)
      capture_ahead();
    done_event[running->slot].synchronize();
    const auto t_done = Clock::now();
    const int64_t R = running->R;
    const int32_t* const tokens_back = host_tokens[running->slot];
    if (!running->has_prefill) stats_.decode_wait_seconds += seconds_between(t_wait, t_done);
    (running->has_prefill ? stats_.prefill_step_seconds : stats_.decode_step_seconds) +=
        seconds_between(t_iter, t_done) - host;
    ++(running->has_prefill ? stats_.prefill_steps : stats_.decode_steps);
    if (options_.check_tp_agreement && tp_.size() > 1) {
      const int64_t h = int64_t(tokens_hash(tokens_back, size_t(R)) >> 2);
      int64_t both[2] = {h, -h};
      tp_.all_reduce_i64(both, parallel::ReduceOp::max);
      DAPO_CHECK(both[0] == h && both[1] == -h, "GenerationEngine: tp ranks sampled different tokens in step ",
                 sched.stats().steps, " (their logits differ)");
    }
    sched.commit(std::span<const int32_t>(tokens_back, size_t(R)),
                 std::span<const float>(host_logprobs[running->slot], size_t(R)));
    stats_.host_seconds += host + seconds_since(t_done);
    running = next;
    if (progress) {
      GenerationProgress p;
      p.step = stats_.prefill_steps + stats_.decode_steps;  // the steps committed
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
  stats_.decode_graphs = decode_graphs.size();
  stats_.padded_graph_steps = decode_graphs.padded_steps();
  stats_.seconds = seconds_since(start);
  stats_.tokens_per_s = stats_.seconds > 0 ? double(stats_.scheduler.sampled_tokens) / stats_.seconds : 0.0;
  return sched.result();
}

}  // namespace dapo::rollout
