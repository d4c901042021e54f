// GenerationRun: one generate() of the engine, its setup in the order of
// its members, then one step per run_step().
#include "generation_run.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "dapo/core/carver.h"
#include "dapo/core/error.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/fill.h"
#include "dapo/rollout/tp_sampling.h"

namespace dapo::rollout {
namespace {

// The automatic KV pool's cap is a multiple of this (free memory jitters).
constexpr size_t kPoolQuantum = size_t(256) << 20;

// A prefill step of at least this many new positions keeps the GPU busy
// longer than a decode graph's capture takes on the host (H100, 0.5B: a
// step of 8,192 positions ~13 ms, a capture ~3.5 ms): the engine captures
// one while it waits (capture_ahead).
constexpr int64_t kCaptureAheadTokens = 4096;

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

uint64_t tokens_hash(const int32_t* tokens, size_t n) {
  uint64_t h = kStreamHashInit;
  for (size_t i = 0; i < n; ++i) h = stream_combine(h, uint64_t(uint32_t(tokens[i])));
  return h;
}

// Whether every rank of `tp` holds the same hash (one all-reduce of its
// max and its negated min).
bool tp_agree(const parallel::Comm& tp, uint64_t hash) {
  const int64_t h = int64_t(hash >> 2);
  int64_t both[2] = {h, -h};
  tp.all_reduce_i64(both, parallel::ReduceOp::max);
  return both[0] == h && both[1] == -h;
}

SchedulerLimits scheduler_limits(const EngineOptions& options, const SamplingOptions& sampling, size_t num_prompts,
                                 bool on_gpu) {
  SchedulerLimits limits;
  limits.n = sampling.n;
  limits.max_response_length = sampling.max_response_length;
  limits.eos_ids = sampling.eos_ids;
  limits.max_num_seqs = engine_seats(options, int64_t(num_prompts) * sampling.n, sampling.n);
  limits.spec_tokens = engine_spec_tokens(options, on_gpu);
  limits.spec_max_running = options.spec_max_running;
  limits.max_step_rows = engine_step_rows(options, limits.max_num_seqs, on_gpu);  // >= max_num_seqs
  limits.max_batch_tokens = std::max(options.max_batch_tokens, limits.max_step_rows);
  return limits;
}

int64_t checked_longest_prompt(std::span<const PromptInput> prompts, int64_t V) {
  int64_t longest_prompt = 1;
  for (const PromptInput& p : prompts) {
    DAPO_CHECK(!p.ids.empty(), "GenerationEngine: empty prompt (uid ", p.uid, ")");
    for (const int32_t id : p.ids)
      DAPO_CHECK(id >= 0 && id < V, "GenerationEngine: prompt token ", id, " outside [0, ", V, ")");
    longest_prompt = std::max<int64_t>(longest_prompt, int64_t(p.ids.size()));
  }
  return longest_prompt;
}

ops::Ctx with_scratch(ops::Ctx ctx, Arena& scratch) {
  ctx.scratch = &scratch;
  return ctx;
}

StepRows carve_rows(Arena& arena, int64_t max_seqs, int64_t vl) {
  Carver c(&arena);
  return carve_step_rows(c, max_seqs, vl);
}

ops::SamplingParams sampling_params(const SamplingOptions& sampling) {
  return ops::SamplingParams{sampling.seed, float(sampling.temperature), float(sampling.top_p),
                             int(std::min<int64_t>(std::max<int64_t>(sampling.top_k, 0), INT32_MAX))};
}

std::vector<uint64_t> uids_of(std::span<const PromptInput> prompts) {
  std::vector<uint64_t> uids;
  for (const PromptInput& p : prompts) uids.push_back(p.uid);
  return uids;
}

}  // namespace

GenerationRun::ReadbackSlots::ReadbackSlots(int64_t max_seqs)
    : arena(2 * (2 * size_t(max_seqs) * sizeof(int32_t) + Arena::kAlign), Arena::Pinned{}, "sampled-tokens-host") {
  for (int i = 0; i < 2; ++i) {
    tokens[i] = arena.alloc_array<int32_t>(2 * size_t(max_seqs));
    logprobs[i] = reinterpret_cast<float*>(tokens[i] + max_seqs);
  }
}

GenerationRun::GenerationRun(const model::Qwen2Model& model, const parallel::Comm& tp, const ops::Ctx& ctx,
                             const EngineOptions& options, std::span<const PromptInput> prompts,
                             const SamplingOptions& sampling, GenerationStats& stats)
    : model_(model),
      tp_(tp),
      options_(options),
      sampling_(sampling),
      stats_(stats),
      start_(Clock::now()),
      device_(ops::backend_device(ctx.backend)),
      on_gpu_(ctx.backend == ops::Backend::cuda),
      bs_(options.block_size),
      limits_(scheduler_limits(options, sampling, prompts.size(), ctx.backend == ops::Backend::cuda)),
      max_seqs_(limits_.max_step_rows),
      max_tokens_(limits_.max_batch_tokens),
      longest_prompt_(checked_longest_prompt(prompts, model.dims().V)),
      max_len_(longest_prompt_ + sampling.max_response_length),
      max_blocks_((max_len_ + bs_ - 1) / bs_),
      context_cap_(max_blocks_ * bs_),
      mem_(generation_memory(model.plan(), max_seqs_, max_tokens_, max_len_, bs_, device_,
                             on_gpu_ ? 1 : omp_get_max_threads())),
      act_(mem_.activations, device_, "generation-activations"),
      scratch_(mem_.scratch, device_, "generation-scratch"),
      ctx_(with_scratch(ctx, scratch_)),
      rows_arena_(mem_.rows, device_, "generation-rows"),
      vl_(model.dims().vl),
      rows_(carve_rows(rows_arena_, max_seqs_, vl_)),
      staging_(mem_.staging, ctx_),
      readback_(max_seqs_),
      done_event_{ops::StreamEvent(ctx_), ops::StreamEvent(ctx_)},
      graphs_(on_gpu_ && options.cuda_graphs && ctx.profiler == nullptr),
      launch_ahead_(options.launch_ahead.value_or(on_gpu_)),
      pool_(plan_kv_pool(prompts.size())),
      blocks_(pool_.num_blocks, bs_),
      sched_(blocks_, limits_),
      kv_arena_(queue_prompts(prompts), device_, "kv-cache"),
      cache_(model::allocate_kv_cache(kv_arena_, model.config(), model.dims().tp, pool_.pool_blocks, bs_)),
      pad_block_(zeroed_pad_block()),
      params_(sampling_params(sampling)),
      uids_(uids_of(prompts)),
      // Untruncated sampling at tp = 1 on the GPU: the head fused with the
      // draw (ops/lm_head_sample.h), no logits in memory. Otherwise the
      // logits, then the sampler.
      fused_head_(options.fused_head && model.cached_sample_preferred(ctx_, params_)) {
  stats_.fused_head = fused_head_;
}

GenerationRun::KvPool GenerationRun::plan_kv_pool(size_t num_prompts) const {
  const model::Qwen2Config& config = model_.config();
  const int64_t tp_size = model_.dims().tp, reserved = graphs_ ? 1 : 0;
  size_t budget = options_.kv_cache_bytes, pool_cap = 0;
  bool lowered = false;
  if (budget > 0) {
    // A budget this process cannot have fails in the allocator, far from the key.
    const size_t have = on_gpu_ ? device_memory_free() : host_memory_bytes();
    if (budget > have)
      throw UserError(cat("rollout.kv_cache_gib = ", double(budget) / double(size_t(1) << 30), " GiB is more than ",
                          on_gpu_ ? "this GPU's free memory" : "this process may use", " (",
                          double(have) / double(size_t(1) << 30),
                          " GiB); lower it, or set 0 to size the pool from the requests"));
  }
  if (budget == 0) {
    const int64_t seqs =
        std::min<int64_t>(limits_.max_num_seqs, std::max<int64_t>(1, int64_t(num_prompts) * sampling_.n));
    const KvPoolSizes sizes = kv_pool_sizes(config, tp_size, seqs, max_len_, bs_, graphs_, device_);
    const double fraction = std::clamp(options_.kv_cache_memory_fraction, 0.0, 1.0);
    size_t cap = on_gpu_ ? size_t(double(device_memory_free()) * fraction) : host_memory_bytes() / 4;
    // Free memory jitters by a few MB between runs and ranks: a cap rounded
    // down to a coarse quantum gives the same pool, so the same schedule and
    // the same bits, at every rerun.
    if (cap > kPoolQuantum) cap -= cap % kPoolQuantum;
    // A pinned cap the memory cannot give now is lowered (the caller sees
    // it in the stats: the schedule may then differ from the saved run's).
    if (const size_t pinned = options_.kv_cache_cap_bytes; pinned > 0) {
      lowered = pinned > cap;
      if (!lowered) cap = pinned;
    }
    pool_cap = cap;
    // At least one full sequence; if the device cannot give that, the
    // allocation below says so.
    budget = std::max(sizes.min, std::min(sizes.requests, cap));
  }
  KvPool pool;
  pool.cap = pool_cap;
  pool.cap_lowered = lowered;
  pool.pool_blocks = kv_blocks_for_budget(config, tp_size, bs_, budget, device_);
  // The tp ranks of a group must plan the same steps (their collectives
  // pair up step by step), and admission and preemption follow the pool:
  // every rank takes the smallest pool of the group.
  if (tp_.size() > 1) pool.pool_blocks = tp_.all_reduce_i64(pool.pool_blocks, parallel::ReduceOp::min);
  pool.num_blocks = pool.pool_blocks - reserved;
  if (pool.num_blocks < 1)
    throw UserError(cat("rollout: a KV-cache budget of ", budget, " bytes cannot hold one block of ", bs_,
                        " positions (", model::kv_cache_bytes(config, tp_size, 1, bs_, device_), " bytes)"));
  return pool;
}

// The stats are reset only here, once the prompts fit the pool: a run that
// fails before leaves the last run's. Returns the pool's bytes.
size_t GenerationRun::queue_prompts(std::span<const PromptInput> prompts) {
  for (const PromptInput& p : prompts) sched_.add_prompt(p.uid, p.ids);
  stats_ = GenerationStats{};
  stats_.num_blocks = pool_.num_blocks;
  stats_.block_size = bs_;
  stats_.kv_cache_bytes = model::kv_cache_bytes(model_.config(), model_.dims().tp, pool_.pool_blocks, bs_, device_);
  stats_.kv_cache_cap_bytes = pool_.cap;
  stats_.kv_cache_cap_lowered = pool_.cap_lowered;
  return stats_.kv_cache_bytes;
}

int32_t GenerationRun::zeroed_pad_block() {
  const int32_t pad_block = int32_t(pool_.num_blocks);
  if (graphs_)
    for (const std::vector<Tensor>* pool : {&cache_.k, &cache_.v})
      for (const Tensor& t : *pool) {
        const int64_t per_block = t.numel() / pool_.pool_blocks;
        ops::fill(ctx_, Tensor(static_cast<char*>(t.data) + size_t(pad_block * per_block) * dtype_size(t.dtype),
                               t.dtype, {per_block}, t.device),
                  0.0);
      }
  return pad_block;
}

void GenerationRun::run_step() {
  const auto t_iter = Clock::now();
  double host = 0;
  if (!running_) {
    const StepPlan& plan = sched_.schedule();
    host += seconds_since(t_iter);
    running_ = launch(plan, false, take_slot());
  }
  const std::optional<Launched> next = launch_ahead(host);
  const auto t_done = wait_for_running(t_iter, host);
  commit_running();
  stats_.host_seconds += host + seconds_since(t_done);
  running_ = next;
}

int GenerationRun::take_slot() {
  const int slot = slot_;
  slot_ = 1 - slot_;
  return slot;
}

// While the running step runs: the next one, if it is sure to decode the
// same sequences (a sequence that ends now computes one dropped position).
std::optional<GenerationRun::Launched> GenerationRun::launch_ahead(double& host) {
  if (!launch_ahead_ || running_->has_prefill || !sched_.can_plan_ahead()) return std::nullopt;
  const auto t_ahead = Clock::now();
  const StepPlan& plan = sched_.plan_ahead();
  host += seconds_since(t_ahead);
  const Launched next = launch(plan, true, take_slot());
  ++stats_.steps_ahead;
  return next;
}

// A step on the stream: its copy-on-writes, forward and sampling, the
// read-back of its tokens into slot `slot`, and done_event_[slot] after it.
// `fed`: a plan made ahead, whose input token at row r is the previous
// step's sample r, copied on the device (`sampled` still holds it).
GenerationRun::Launched GenerationRun::launch(const StepPlan& plan, bool fed, int slot) {
  step_.build(plan, sched_, bs_, uids_, sampling_.step, fed);
  Launched l;
  l.slot = slot;
  l.has_prefill = int64_t(step_.tokens.size()) > int64_t(plan.chunks.size());
  l.tokens = int64_t(step_.tokens.size());
  const int64_t B = int64_t(plan.chunks.size()), R = int64_t(plan.rows.size());
  l.R = R;
  DAPO_CHECK(B <= max_seqs_ && int64_t(step_.tokens.size()) <= max_tokens_ && R <= max_seqs_, "step of ", B,
             " sequences, ", step_.tokens.size(), " tokens and ", R, " rows over the planned ", max_seqs_, " and ",
             max_tokens_);
  // A pure decode step replays the graph of its (batch, context) bucket;
  // anything else runs eagerly.
  if (graphs_ && !l.has_prefill && step_.rows_are_chunks && R == B)
    replay_decode(B, fed, slot);
  else
    run_eager(B, R, fed, slot);
  done_event_[slot].record(ctx_);
  return l;
}

// The graph of the step's bucket, captured the first time the bucket comes
// up. The graph holds the whole step: the metadata's way in (and the fed
// tokens), the forward, the sampling of every padded row and the samples'
// way out (ops/step_io.h), so a step is one launch.
void GenerationRun::replay_decode(int64_t B, bool fed, int slot) {
  const int64_t Cp = context_bucket(step_.max_context_len, context_cap_);
  const int64_t W = (Cp + bs_ - 1) / bs_;  // the block table's width
  const DecodeGraphs::Pick pick = decode_graphs_.pick(batch_bucket(B, max_seqs_), Cp);
  const int64_t Bp = pick.rows;
  pad_decode(padded_, step_.tokens, step_.positions, step_.slot_mapping, step_.block_table, step_.max_blocks,
             step_.context_lens, Bp, W, pad_block_);
  const StepViews v = stage(staging_, padded_, W, Cp, step_, Bp);
  const ops::StepIn in{staging_.packed_host(), staging_.packed_device(), v.batch.tokens,
                       Tensor(rows_.sampled, DType::i32, {B}, device_), fed ? B : 0, staging_.capacity_words()};
  const ops::StepOut out = readback_args(slot, Bp);
  // Copy-on-writes read their block lists before the graph: upload them
  // (the graph's step_in then moves the same bytes again).
  if (!step_.copy_src.empty()) {
    staging_.upload();
    run_copies(ctx_, cache_, step_, v);
  }
  ops::CapturedGraph* graph = pick.graph != nullptr ? pick.graph : &capture_decode(Bp, Cp, v, in, out);
  ops::set_step_in(*graph, in);
  ops::set_step_out(*graph, out);
  graph->launch(ctx_);
}

// Rows map to logits rows one for one, except where a prompt whose prefill
// ends here is sampled n times from its one row.
void GenerationRun::run_eager(int64_t B, int64_t R, bool fed, int slot) {
  StepViews v = stage(staging_, step_.arrays, step_.max_blocks, step_.max_context_len, step_, R);
  staging_.upload();
  if (fed)
    ops::copy(ctx_, Tensor(v.batch.tokens.data, DType::i32, {B}, device_),
              Tensor(rows_.sampled, DType::i32, {B}, device_));
  // GPU prefill steps of fresh prompts take the flash attention kernels;
  // the CPU backend (the reference) keeps one attention path for all steps.
  if (on_gpu_) v.batch.fresh_max_seqlen = step_.fresh_max_seqlen;
  run_copies(ctx_, cache_, step_, v);
  const Tensor step_logits(rows_.logits, DType::f32, {B, vl_}, device_);
  forward_sample(R, step_logits, step_.rows_are_chunks ? Tensor{} : v.logit_rows, v);
  if (R > 0) {
    const ops::StepOut out = readback_args(slot, R);
    ops::copy(ctx_, out.host, out.device);
  }
}

// Waits for the running step's tokens (capturing a decode graph meanwhile
// when a long prefill leaves the host idle) and books the step's time;
// returns when the tokens arrived.
Clock::time_point GenerationRun::wait_for_running(Clock::time_point t_iter, double host) {
  const auto t_wait = Clock::now();
  if (graphs_ && options_.capture_graphs_ahead && running_->has_prefill && running_->tokens >= kCaptureAheadTokens)
    capture_ahead();
  done_event_[running_->slot].synchronize();
  const auto t_done = Clock::now();
  if (!running_->has_prefill) stats_.decode_wait_seconds += seconds_between(t_wait, t_done);
  (running_->has_prefill ? stats_.prefill_step_seconds : stats_.decode_step_seconds) +=
      seconds_between(t_iter, t_done) - host;
  ++(running_->has_prefill ? stats_.prefill_steps : stats_.decode_steps);
  return t_done;
}

void GenerationRun::commit_running() {
  const int64_t R = running_->R;
  const int32_t* const tokens_back = readback_.tokens[running_->slot];
  if (options_.check_tp_agreement && tp_.size() > 1) check_tp_agreement(tokens_back, R);
  // What every step ran and sampled, for the check at the end of the run.
  run_hash_ = stream_combine(run_hash_, uint64_t(running_->tokens));
  run_hash_ = stream_combine(run_hash_, tokens_hash(tokens_back, size_t(R)));
  sched_.commit(std::span<const int32_t>(tokens_back, size_t(R)),
                std::span<const float>(readback_.logprobs[running_->slot], size_t(R)));
}

void GenerationRun::check_tp_agreement(const int32_t* tokens, int64_t R) const {
  DAPO_CHECK(tp_agree(tp_, tokens_hash(tokens, size_t(R))), "GenerationEngine: tp ranks sampled different tokens in step ",
             sched_.stats().steps, " (their logits differ)");
}

void GenerationRun::report_progress(const ProgressCallback& progress) const {
  GenerationProgress p;
  p.step = stats_.prefill_steps + stats_.decode_steps;  // the steps committed
  p.running = sched_.num_running();
  p.waiting = sched_.num_waiting();
  p.finished = sched_.num_finished();
  p.total = sched_.num_responses();
  p.generated_tokens = sched_.stats().sampled_tokens;
  p.kv_positions_read = sched_.stats().kv_positions_read;
  p.elapsed_s = seconds_since(start_);
  p.tokens_per_s = p.elapsed_s > 0 ? double(p.generated_tokens) / p.elapsed_s : 0.0;
  progress(p);
}

RolloutBatch GenerationRun::finish() {
  // The tp ranks ran the same steps and sampled the same tokens: checked
  // once a run in every build (check_tp_agreement checks every step, in
  // debug builds). A difference means their collectives summed different
  // sequences' activations.
  if (tp_.size() > 1)
    DAPO_CHECK(tp_agree(tp_, run_hash_), "GenerationEngine: the tp ranks of this group planned or sampled different ",
               "steps over ", sched_.stats().steps, " steps (their schedules diverged)");
  stats_.scheduler = sched_.stats();
  stats_.decode_graphs = decode_graphs_.size();
  stats_.padded_graph_steps = decode_graphs_.padded_steps();
  stats_.seconds = seconds_since(start_);
  stats_.tokens_per_s = stats_.seconds > 0 ? double(stats_.scheduler.sampled_tokens) / stats_.seconds : 0.0;
  return sched_.result();
}

void GenerationRun::forward_sample(int64_t rows, const Tensor& step_logits, const Tensor& rows_of,
                                   const StepViews& v) {
  const Tensor tokens(rows_.sampled, DType::i32, {rows}, device_);
  const Tensor logprobs(rows_.sampled + max_seqs_, DType::f32, {rows}, device_);
  const Tensor streams(v.streams.data, DType::i64, {rows}, device_);
  const Tensor counters(v.counters.data, DType::i64, {rows}, device_);
  if (fused_head_) {
    model_.forward_cached_sample(ctx_, act_, cache_, v.batch, {tokens, logprobs, rows_of, streams, counters, params_});
    return;
  }
  model_.forward_cached(ctx_, act_, cache_, v.batch, step_logits);
  if (rows == 0) return;
  if (model_.dims().tp > 1)
    sample_tokens_tp(ctx_, tp_, tokens, logprobs, step_logits, rows_of, streams, counters, params_,
                     model_.dims().vocab_start);
  else
    ops::sample_tokens(ctx_, tokens, logprobs, step_logits, rows_of, streams, counters, params_);
  // A batch-invariant model (rollout.exact_logprobs) records the log-probs
  // of the trainer's own head routine over these logits, at the trainer's
  // 1 / temperature: the old log-probs, bit for bit. Greedy rows keep the
  // sampler's convention, temperature 1.
  if (model_.batch_invariant()) {
    const float inv_t = sampling_.temperature > 0 ? float(1.0 / sampling_.temperature) : 1.0f;
    model_.score_sampled(ctx_, act_, step_logits, rows_of, tokens, inv_t, logprobs);
  }
}

// The one read-back of a step (tokens, the rows between, log-probs) into
// slot `slot`; it also tells the host that the step's staged metadata was
// consumed.
ops::StepOut GenerationRun::readback_args(int slot, int64_t rows) const {
  return ops::StepOut{Tensor(readback_.tokens[slot], DType::i32, {max_seqs_ + rows}),
                      Tensor(rows_.sampled, DType::i32, {max_seqs_ + rows}, device_), 2 * max_seqs_};
}

// The decode graph of bucket (Bp, Cp) over the staged views v: the
// metadata's way in, the forward, the sampling of every padded row, the
// samples' way out (ops/step_io.h). A step is then one launch.
ops::CapturedGraph& GenerationRun::capture_decode(int64_t Bp, int64_t Cp, const StepViews& v, const ops::StepIn& in,
                                                  const ops::StepOut& out) {
  const auto t_capture = Clock::now();
  const Tensor padded_logits(rows_.logits, DType::f32, {Bp, vl_}, device_);
  ops::CapturedGraph& graph = decode_graphs_.add(Bp, Cp, ops::CapturedGraph::capture(ctx_, [&] {
    ops::step_in(ctx_, in);
    forward_sample(Bp, padded_logits, Tensor{}, v);
    ops::step_out(ctx_, out);
  }));
  stats_.graph_capture_seconds += seconds_since(t_capture);
  return graph;
}

// While a long prefill step runs, the host has nothing to do but wait: it
// captures a decode graph the steps after the prefills will need (the
// batch of every response still to run, at the first two context buckets
// past the longest prompt), one per wait, instead of between two steps
// while the GPU idles. Its views come from staging a step of padding rows
// of the same shape (the same sizes give the same device addresses) into
// the host block the running step does not use: the step before it, its
// last user, has completed.
void GenerationRun::capture_ahead() {
  if (sampling_.max_response_length < 2) return;  // no decode steps
  const int64_t Bp =
      batch_bucket(std::clamp<int64_t>(sched_.num_responses() - sched_.num_finished(), 1, max_seqs_), max_seqs_);
  const int64_t first = context_bucket(longest_prompt_ + 1, context_cap_);
  for (const int64_t Cp : {first, first < context_cap_ ? context_bucket(first + 1, context_cap_) : first}) {
    if (decode_graphs_.has(Bp, Cp)) continue;
    const int64_t W = (Cp + bs_ - 1) / bs_;
    PaddedDecode pad;
    pad_decode(pad, {}, {}, {}, {}, 0, {}, Bp, W, pad_block_);
    StepBuffers none;
    const StepViews v = stage(staging_, pad, W, Cp, none, Bp);
    capture_decode(Bp, Cp, v,
                   ops::StepIn{staging_.packed_host(), staging_.packed_device(), v.batch.tokens,
                               Tensor(rows_.sampled, DType::i32, {0}, device_), 0, staging_.capacity_words()},
                   readback_args(0, Bp));
    ++stats_.graphs_captured_ahead;
    return;
  }
}

}  // namespace dapo::rollout
