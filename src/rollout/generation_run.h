// One GenerationEngine::generate(): the memory of a step, then the KV pool
// from what is left, then steps until every response is done. A step is
// launched (or was, ahead of the one before it), waited for and committed:
// its copy-on-writes, its forward over the paged cache and the sampling of
// the rows that need a token, on the stream; the tokens back to the
// scheduler on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/core/clock.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/cuda_graph.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/step_io.h"
#include "dapo/rollout/block_manager.h"
#include "dapo/rollout/engine.h"
#include "dapo/rollout/scheduler.h"
#include "decode_graphs.h"
#include "step_buffers.h"
#include "step_staging.h"

namespace dapo::rollout {

class GenerationRun {
 public:
  // Checks the prompts, carves the memory of a step, sizes and allocates
  // the KV pool, queues the prompts, and resets `stats` (the engine's, which
  // the run fills as it goes). Collective over tp from the first step.
  // The references must outlive the run.
  GenerationRun(const model::Qwen2Model& model, const parallel::Comm& tp, const ops::Ctx& ctx,
                const EngineOptions& options, std::span<const PromptInput> prompts, const SamplingOptions& sampling,
                GenerationStats& stats);

  bool done() const { return sched_.done() && !running_; }
  // Commits one step: launches it unless it was launched ahead, launches
  // the one after it while it runs when it can, then waits for its tokens.
  void run_step();
  void report_progress(const ProgressCallback& progress) const;
  // The stats' totals, and the responses.
  RolloutBatch finish();

 private:
  // Two read-back slots: a step's tokens land in one while the host reads
  // the previous step's from the other (launch-ahead). A slot mirrors
  // `sampled` (max_seqs tokens, then max_seqs log-probs), so that one copy
  // of its first max_seqs + R words brings both back.
  struct ReadbackSlots {
    explicit ReadbackSlots(int64_t max_seqs);
    Arena arena;
    int32_t* tokens[2];
    float* logprobs[2];
  };
  struct KvPool {
    int64_t pool_blocks = 0;
    int64_t num_blocks = 0;  // what the scheduler may use: the pool less the reserved pad block
    size_t cap = 0;          // the automatic budget's memory cap (0: a fixed budget)
    bool cap_lowered = false;  // a pinned cap above what the memory gives now
  };
  // A step on the stream, not committed yet.
  struct Launched {
    int64_t R = 0;
    int64_t tokens = 0;  // new positions
    int slot = 0;
    bool has_prefill = false;
  };

  KvPool plan_kv_pool(size_t num_prompts) const;
  size_t queue_prompts(std::span<const PromptInput> prompts);
  int32_t zeroed_pad_block();

  int take_slot();
  Launched launch(const StepPlan& plan, bool fed, int slot);
  void replay_decode(int64_t B, bool fed, int slot);
  void run_eager(int64_t B, int64_t R, bool fed, int slot);
  std::optional<Launched> launch_ahead(double& host);
  Clock::time_point wait_for_running(Clock::time_point t_iter, double host);
  void commit_running();
  void check_tp_agreement(const int32_t* tokens, int64_t R) const;

  void forward_sample(int64_t rows, const Tensor& step_logits, const Tensor& rows_of, const StepViews& v);
  ops::StepOut readback_args(int slot, int64_t rows) const;
  ops::CapturedGraph& capture_decode(int64_t Bp, int64_t Cp, const StepViews& v, const ops::StepIn& in,
                                     const ops::StepOut& out);
  void capture_ahead();

  const model::Qwen2Model& model_;
  const parallel::Comm& tp_;
  const EngineOptions& options_;
  const SamplingOptions& sampling_;
  GenerationStats& stats_;
  // Declared in the order generate() sets them up, which the initializers
  // follow: the pool takes the memory that the step's buffers leave.
  const Clock::time_point start_;
  const Device device_;
  const bool on_gpu_;
  const int64_t bs_;
  const SchedulerLimits limits_;
  const int64_t max_seqs_, max_tokens_;
  const int64_t longest_prompt_;
  const int64_t max_len_, max_blocks_;
  const int64_t context_cap_;  // decode graphs' context buckets stop here
  const GenerationMemory mem_;
  Arena act_;
  Arena scratch_;
  ops::Ctx ctx_;  // the engine's, with scratch_
  Arena rows_arena_;
  const int64_t vl_;  // logits rows of this rank's vocabulary shard (the whole vocabulary at tp = 1)
  const StepRows rows_;
  StepStaging staging_;
  ReadbackSlots readback_;
  ops::StreamEvent done_event_[2];
  // Decode steps replay CUDA graphs (not while a profiler brackets each
  // op), whose padding rows read one reserved block of the pool.
  const bool graphs_;
  const bool launch_ahead_;
  const KvPool pool_;
  BlockManager blocks_;
  Scheduler sched_;
  Arena kv_arena_;
  const model::KvCache cache_;
  const int32_t pad_block_;  // the last block: zeros, read by padding rows only
  DecodeGraphs decode_graphs_;
  PaddedDecode padded_;
  const ops::SamplingParams params_;
  StepBuffers step_;
  std::vector<uint64_t> uids_;
  const bool fused_head_;
  std::optional<Launched> running_;  // launched, not committed
  int slot_ = 0;
  uint64_t run_hash_ = kStreamHashInit;  // every committed step's positions and tokens
};

}  // namespace dapo::rollout
