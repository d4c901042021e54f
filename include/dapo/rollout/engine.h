// The generation engine: n sampled responses per prompt from a Qwen2Model,
// with continuous batching (rollout/scheduler.h) over a paged KV cache whose
// blocks the samples of a prompt share (rollout/block_manager.h), a KV pool
// sized from a memory budget, and sampling by ops::sample_tokens.
//
// Randomness: token t of response k of prompt uid in training step s is
// drawn with Philox key `seed`, stream stream_id({s, uid, k}) and counter t
// (sample_stream below). Nothing depends on a position in a batch, so a
// response is the same whatever else is generated with it, whatever the
// batch limits and KV budget, and whatever the tp or dp size (up to float
// rounding of the model's logits, which can tip a draw that falls within
// ~1e-7 of a boundary).
//
// Tensor parallelism: the tp ranks of a group call generate() together
// with the same prompts. Each keeps the logits of its vocabulary shard
// (the LM head is column-parallel) and sample_tokens_tp (tp_sampling.h)
// draws from the shards with small per-row collectives, never gathering
// the full-vocabulary logits; every rank gets the same tokens, so the
// schedulers stay in step without talking; EngineOptions::check_tp_agreement
// verifies it at every step.
//
// Memory: each generate() carves, on the backend's device, the activations
// of one step (max_batch_tokens new tokens of max_num_seqs sequences), the
// ops' scratch, the step's logits rows, then the KV pool (its budget), and
// gives them all back when it returns, so the update phase gets the memory
// after generation. On a GPU without a set budget the pool takes what the
// requests can use, at most kv_cache_memory_fraction of the memory then free.
//
// Backends: the scheduler and the step metadata (block tables, slot
// mappings, copy-on-write pairs, random-stream keys) live on the host. On
// a GPU the metadata reaches the device in one pinned host-to-device copy
// per step, the forward and the sampler run on the ctx's stream, and the
// sampled tokens and log-probs come back in one device-to-host copy, the
// step's only synchronisation. The model's weights are read where they are
// (the ParamStore's compute copy: the trainer's own bf16 weights).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/core/rng.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/context.h"
#include "dapo/parallel/comm.h"
#include "dapo/rollout/rollout_batch.h"
#include "dapo/rollout/scheduler.h"

namespace dapo::rollout {

#ifdef NDEBUG
inline constexpr bool kDebugBuild = false;
#else
inline constexpr bool kDebugBuild = true;
#endif

struct EngineOptions {
  int64_t block_size = 16;          // positions per KV-cache block
  // KV-cache budget of this rank in bytes (both pools, every layer).
  // 0: what the requests can use (max_num_seqs sequences of the longest
  // prompt + max_response_length), at most a quarter of the host memory
  // (CPU) or kv_cache_memory_fraction of the free GPU memory (CUDA).
  size_t kv_cache_bytes = 0;
  // kv_cache_bytes = 0 on a GPU: at most this fraction of the free memory.
  double kv_cache_memory_fraction = 0.9;
  // kv_cache_bytes = 0: the memory cap of the automatic pool, fixed instead
  // of read from free memory at every generate() (whose jitter would change
  // the pool, so the schedule and the bits). The trainer pins the first
  // round's cap for the run and keeps it in its checkpoints. 0: not pinned.
  // A pinned cap above what the device has free now is lowered (the stats
  // say so).
  size_t kv_cache_cap_bytes = 0;
  // Sequences per step. 0: every sequence of the round may run at once,
  // as far as the KV pool holds them (the scheduler admits a sequence while
  // the pool has blocks for it and preempts the youngest when it runs out),
  // up to kAutoMaxNumSeqs; the long answers of a round then start with the
  // rest instead of waiting for seats, and the round ends sooner (H200,
  // 1.5B, 512 answers up to 20,480 tokens: see docs/PERFORMANCE.md).
  // > 0: a cap (raised to n). engine_seats() says what a round gets.
  int64_t max_num_seqs = 0;
  int64_t max_batch_tokens = 4096;  // new positions per step (raised to max_num_seqs)
  // All-reduce a hash of every step's sampled tokens over tp and fail if
  // the ranks disagree (one tiny all-reduce per step).
  bool check_tp_agreement = kDebugBuild;
  // On a GPU, replay pure decode steps as CUDA graphs, one per bucket of
  // batch size and context length (rollout/decode_graphs.h). They are
  // captured during the generate() that first needs them and dropped when
  // it returns (its memory goes back to the update phase). One block of the
  // KV budget is set aside as the padding rows' block. Off while the ctx
  // carries an OpProfiler.
  bool cuda_graphs = true;
  // Launch-ahead: while a pure decode step runs, plan and launch the next
  // one (Scheduler::plan_ahead), its input tokens copied on the device from
  // the running step's samples, so that the GPU does not wait for the
  // host's commit, planning and launches between the two. A sequence that
  // ends in the running step computes one dropped position in the next.
  // Where no response ends on the way the responses are the same bits
  // either way. Where one does, its dropped row can move the step into
  // another batch-size bucket, and on a GPU the products' plans (and so the
  // other rows' roundings) depend on the batch size, as they do on
  // max_num_seqs: the tokens may differ, the run stays reproducible. H100,
  // 0.5B and 1.5B fixed loads: 2.2% and 1.0% more tokens/s, the 1.5B DAPO
  // load 2.0% (bench_generate_gpu --no-launch-ahead against the default).
  // Unset: on for CUDA; off on the CPU backend, whose ops run as they are
  // called, so that there is nothing to overlap and the dropped rows only
  // cost (the 2-core demo's training: 54 s off, 60 s on, mean of 3-4 runs).
  // Set, it applies on either backend (the CPU tests check the loop).
  std::optional<bool> launch_ahead;
  // With cuda_graphs: while a prefill step of >= 4,096 positions runs,
  // capture the decode graphs the first decode steps will need (the host
  // only waits then), instead of between two steps while the GPU idles.
  // The same graphs either way, so the same bits (EngineGpu); H100, 0.5B
  // fixed load: 0.765 -> 0.756 s.
  bool capture_graphs_ahead = true;
  // Untruncated sampling (temperature > 0, no top-k, no top-p) at tp = 1
  // runs the LM head fused with the draw where the backend prefers it
  // (Qwen2Model::forward_cached_sample, ops/lm_head_sample.h: CUDA sm_90a),
  // without the logits in memory. false: the logits, then sample_tokens
  // (for comparisons; the tokens agree except where a draw falls within
  // rounding of a CDF boundary).
  bool fused_head = true;
  // Exact speculative decoding in the tail of a round (rollout/scheduler.h,
  // rollout/ngram_proposer.h): up to spec_tokens n-gram draft tokens per
  // sample and step while at most spec_max_running sequences run. The
  // kept tokens are the ones plain decoding samples (the same random
  // draws), so the distribution does not change; the tokens may differ
  // where a logit's rounding in the larger step tips a draw, as with
  // launch_ahead. -1: 4 on CUDA, 0 (off) on the CPU backend, whose steps
  // cost in proportion to their rows. 0: off. A draft row re-reads its
  // sequence's KV (H200, 1.5B, 4 drafts a sequence: the step costs +6% at
  // 1 sequence of 4,096 positions, +21% at 8, +55% at 8 of 16,384, +94% at
  // 32 of 4,096: bench_decode_step_gpu --drafts), hence the tail of 8.
  int64_t spec_tokens = -1;
  int64_t spec_max_running = 8;
};

struct SamplingOptions {
  int64_t n = 1;                     // responses per prompt
  double temperature = 1.0;          // 0: greedy
  double top_p = 1.0;                // 1: off
  int64_t top_k = 0;                 // <= 0: off
  int64_t max_response_length = 1;   // tokens per response (an EOS included)
  uint64_t seed = 0;                 // Philox key (train.seed)
  uint64_t step = 0;                 // training step (0 for `dapo generate`): part of every stream
  std::vector<int32_t> eos_ids;      // ids that end a response
};

// rollout.{n, temperature, top_p, top_k, max_response_length} and
// train.seed of `config`, with the given EOS ids and step.
SamplingOptions sampling_options(const Config& config, std::vector<int32_t> eos_ids, uint64_t step);
// The same with the validation settings rollout.val_{n, temperature, top_p, top_k}.
SamplingOptions validation_sampling_options(const Config& config, std::vector<int32_t> eos_ids, uint64_t step);

// max_num_seqs = 0 runs at most this many sequences per step: the step's
// buffers (sampled rows, metadata, the logits rows of an unfused head) are
// carved for them before the KV pool.
inline constexpr int64_t kAutoMaxNumSeqs = 2048;

// The seats a generate() of `sequences` sequences (prompts x n) with n
// samples per prompt runs: max_num_seqs, or with 0 every sequence up to
// kAutoMaxNumSeqs; never fewer than n (a prompt's samples start together).
int64_t engine_seats(const EngineOptions& options, int64_t sequences, int64_t n);

// EngineOptions::spec_tokens resolved for a backend.
int64_t engine_spec_tokens(const EngineOptions& options, bool on_gpu);

// The rows (chunks, sampled tokens) a step of `seats` seats carves room
// for: the seats, or when speculating more, the drafts of a tail of
// spec_max_running sequences included.
int64_t engine_step_rows(const EngineOptions& options, int64_t seats, bool on_gpu);

// rollout.{block_size, max_num_seqs, max_num_batched_tokens, kv_cache_gib,
// kv_cache_memory_fraction}.
EngineOptions engine_options(const Config& config);

// The random stream of response `sample` of prompt `prompt_uid` in `step`.
constexpr uint64_t sample_stream(uint64_t step, uint64_t prompt_uid, int64_t sample) {
  return stream_id({step, prompt_uid, uint64_t(sample)});
}

// One prompt to answer: its uid (data::prompt_uid: the sampler's key) and
// token ids (non-empty, in [0, vocab_size)).
struct PromptInput {
  uint64_t uid = 0;
  std::vector<int32_t> ids;
};

// What a progress line shows; passed after every engine step.
struct GenerationProgress {
  int64_t step = 0;               // engine steps so far
  int64_t running = 0;            // sequences in the cache
  int64_t waiting = 0;            // sequences queued (prompts not started, preempted samples)
  int64_t finished = 0;           // complete responses
  int64_t total = 0;              // responses asked for
  int64_t generated_tokens = 0;   // response tokens sampled so far
  int64_t kv_positions_read = 0;  // SchedulerStats::kv_positions_read of the steps planned so far
  double elapsed_s = 0;
  double tokens_per_s = 0;        // generated_tokens / elapsed_s
};
using ProgressCallback = std::function<void(const GenerationProgress&)>;

struct GenerationStats {
  SchedulerStats scheduler;
  int64_t num_blocks = 0;         // KV pool of the last generate()
  int64_t block_size = 0;
  size_t kv_cache_bytes = 0;
  size_t kv_cache_cap_bytes = 0;  // the automatic pool's memory cap it used (0: a fixed kv_cache_bytes)
  bool kv_cache_cap_lowered = false;  // the pinned cap was more than the memory gave: lowered to that
  double seconds = 0;
  double tokens_per_s = 0;        // sampled tokens per second
  // Where the wall time went: planning and bookkeeping on the host
  // (schedule, metadata, commit), and the steps from their launch to the
  // tokens' arrival on the host, split into steps with prefill positions
  // (chunked prefill or recomputation, decodes riding along) and pure
  // decode steps.
  double host_seconds = 0;
  double prefill_step_seconds = 0;
  double decode_step_seconds = 0;
  // Of decode_step_seconds: the host blocked until the step's tokens
  // arrived; the rest is its padding, staging and launch calls, during which
  // the GPU waits for the step.
  double decode_wait_seconds = 0;
  int64_t prefill_steps = 0;
  int64_t decode_steps = 0;
  bool fused_head = false;         // the head ran fused with the draw (EngineOptions::fused_head)
  int64_t steps_ahead = 0;        // decode steps launched while the step before them ran (launch_ahead)
  int64_t decode_graphs = 0;      // CUDA graphs captured (one per batch and context bucket met)
  // Decode steps that replayed a larger batch bucket's graph while their own
  // bucket had none yet (DecodeGraphs::kPadSteps).
  int64_t padded_graph_steps = 0;
  // Of decode_graphs: captured while a prefill step ran, before a step
  // needed them (the host's wait for the prefill hides their capture).
  int64_t graphs_captured_ahead = 0;
  // Of decode_step_seconds: capturing and instantiating those graphs (their
  // steps run eagerly under capture, then launch once).
  double graph_capture_seconds = 0;
};

// Blocks of `block_size` positions whose cache (model::kv_cache_bytes on
// `device`) fits `budget_bytes` on this rank; 0 when not even one does.
int64_t kv_blocks_for_budget(const model::Qwen2Config& config, int64_t tp_size, int64_t block_size,
                             size_t budget_bytes, Device device = Device::cpu);

// The KV pool's two sizes for `seqs` sequences of up to max_len positions
// (the longest prompt plus max_response_length) on this rank: `min` holds one
// full-length sequence, `requests` every sequence at full length at once, with
// a block of slack each (copy-on-write of a shared prompt's last block). Both
// include the zeroed padding block that the decode graphs' padding rows read
// when `graphs`. generate() takes `requests`, capped by
// kv_cache_memory_fraction of free memory, but never less than `min`; the
// memory plan (trainer/memory_plan.h) shows both.
struct KvPoolSizes {
  size_t min = 0, requests = 0;
};
KvPoolSizes kv_pool_sizes(const model::Qwen2Config& config, int64_t tp_size, int64_t seqs, int64_t max_len,
                          int64_t block_size, bool graphs, Device device);

// The device memory of one generate() besides the KV pool, from the same
// carves generate() makes: a step's activations (max_tokens new tokens of
// max_seqs sequences), the ops' scratch, the step's logits rows and the
// metadata staging block (on a GPU also two pinned host blocks of that size,
// which take turns).
// max_len: the longest prompt plus max_response_length.
struct GenerationMemory {
  size_t activations = 0, scratch = 0, rows = 0, staging = 0;
  size_t total() const { return activations + scratch + rows + staging; }
};
GenerationMemory generation_memory(const model::Qwen2Model::Plan& plan, int64_t max_seqs, int64_t max_tokens,
                                   int64_t max_len, int64_t block_size, Device device, int threads);

class GenerationEngine {
 public:
  // `model`, `tp` (the model's tp Comm) must outlive the engine. The ctx's
  // backend and library handles are used; its scratch is replaced by the
  // engine's own.
  GenerationEngine(const model::Qwen2Model& model, const parallel::Comm& tp, const ops::Ctx& ctx,
                   EngineOptions options = {});

  // n responses to each prompt, ordered by prompt then sample index.
  // Collective over tp. Throws UserError when the KV budget cannot hold one
  // prompt with a full response (the same on every tp rank).
  RolloutBatch generate(std::span<const PromptInput> prompts, const SamplingOptions& sampling,
                        const ProgressCallback& progress = {});

  const EngineOptions& options() const { return options_; }
  // Fixes the automatic pool's memory cap (EngineOptions::kv_cache_cap_bytes).
  void pin_kv_cache_cap(size_t bytes) { options_.kv_cache_cap_bytes = bytes; }
  // Of the last generate().
  const GenerationStats& stats() const { return stats_; }

 private:
  const model::Qwen2Model& model_;
  const parallel::Comm& tp_;
  ops::Ctx ctx_;
  EngineOptions options_;
  GenerationStats stats_;
};

}  // namespace dapo::rollout
