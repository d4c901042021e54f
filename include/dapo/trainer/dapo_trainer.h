// The DAPO trainer: one call of step() runs the phases of docs/DESIGN.md
// section 2 - generation rounds with dynamic sampling and balancing
// (generation_phase.h), advantages, old log-probs and the mini-batch
// updates (update_phase.h) - and returns the step's metrics, reduced over
// ranks and the same on every rank.
//
// The policy's weights live in one ParamStore shared by the generation
// engine and the update (no copy, no resharding between phases). With
// algorithm.kl_coef > 0 a frozen copy of the starting weights scores the
// reference log-probs.
#pragma once

#include <cstdint>
#include <memory>

#include "dapo/core/config.h"
#include "dapo/data/prompt_order.h"
#include "dapo/data/tokenizer.h"
#include "dapo/model/param_store.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"
#include "dapo/rollout/engine.h"
#include "dapo/trainer/generation_phase.h"
#include "dapo/trainer/metrics_writer.h"
#include "dapo/trainer/prompt_set.h"
#include "dapo/trainer/rollout_groups.h"
#include "dapo/trainer/update_phase.h"
#include "dapo/trainer/update_step.h"
#include "dapo/trainer/watchdog.h"

namespace dapo::trainer {

struct DapoStepResult {
  int64_t step = 0;         // 1-based
  Metrics metrics;          // verl's names (step_metrics.h)
  GenerationResult generation;  // this rank's groups of every round and the kept ones (rollout dumps)
  UpdatePhaseResult update;
  double seconds = 0;       // wall time of the step (world rank 0's clock)
};

class DapoTrainer {
 public:
  // params: this rank's slices of the policy; reference: a copy of the
  // starting weights (required iff algorithm.kl_coef > 0). grid, config,
  // tokenizer and prompts must outlive the trainer. check_training_config
  // is the caller's.
  // gpu: this rank's GPU when the stores live there (parallel.backend =
  // cuda), nullptr on the CPU backend. Generation and the update then both
  // run on it, one after the other, each giving its working memory back
  // when it ends (the engine its KV pool, the update its activations).
  DapoTrainer(model::ParamStore& params, std::unique_ptr<model::ParamStore> reference, const parallel::Grid& grid,
              const Config& config, const data::Tokenizer& tokenizer, const PromptSet& prompts,
              const ops::CudaDevice* gpu = nullptr);

  // One training step. Collective over grid.world. UserError (on every rank
  // alike) when dynamic sampling runs out of generation rounds with
  // rollout.on_short_batch = fail, or a sequence does not fit
  // train.max_token_len_per_gpu. A short batch otherwise trains on the
  // groups kept (none: no optimizer step) and warns.
  DapoStepResult step();

  int64_t steps_done() const { return steps_done_; }
  // Continues after a checkpoint (checkpointing.h): `steps_done` steps
  // taken, the prompt order at `order` (UserError naming `origin` when it
  // does not fit this run's data and seed). Weights and optimizer state are
  // restored by resume_training.
  void restore(int64_t steps_done, const data::PromptOrderState& order, const std::string& origin);
  // The KV pool's memory cap (rollout::EngineOptions::kv_cache_cap_bytes):
  // with rollout.kv_cache_gib = 0, the first step's, the smallest over the
  // world, fixed for the run (0 before it, or with a fixed budget).
  // Checkpoints keep it; restore_kv_cache_cap puts a saved one back.
  int64_t kv_cache_cap_bytes() const { return int64_t(engine_.options().kv_cache_cap_bytes); }
  void restore_kv_cache_cap(int64_t bytes);
  model::ParamStore& params() { return model_.params(); }
  data::PromptOrder& order() { return order_; }
  optim::AdamW& optimizer() { return optimizer_; }
  rollout::GenerationEngine& engine() { return engine_; }
  // The update's arenas in the last step, before they were given back.
  const UpdateRunner::ArenaUse& last_update_memory() const { return last_update_memory_; }
  const RewardSettings& rewards() const { return rewards_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // Called after every engine step of generation (progress lines).
  void set_progress(rollout::ProgressCallback progress) { progress_ = std::move(progress); }
  // Told when the generation and update phases start (may be null).
  void set_watchdog(Watchdog* watchdog) { watchdog_ = watchdog; }

 private:
  void pin_kv_cache_cap();  // after a step's generation; collective over grid.world
  const parallel::Grid& grid_;
  const Config& config_;
  const PromptSet& prompts_;
  const ops::CudaDevice* gpu_;
  Arena engine_scratch_;  // none: the engine carves its own per generate()
  model::Qwen2Model model_;
  optim::AdamW optimizer_;
  UpdateRunner actor_;
  std::unique_ptr<model::ParamStore> ref_params_;
  std::unique_ptr<model::Qwen2Model> ref_model_;
  std::unique_ptr<UpdateRunner> ref_runner_;
  rollout::GenerationEngine engine_;
  data::PromptOrder order_;
  std::vector<int32_t> eos_ids_;
  RewardSettings rewards_;
  rollout::ProgressCallback progress_;
  Watchdog* watchdog_ = nullptr;
  int64_t steps_done_ = 0;
  UpdateRunner::ArenaUse last_update_memory_;
  bool cap_lowered_warned_ = false;  // the pinned KV cap's lowering said once
};

// Stops a run whose update could not move the weights: when every
// optimizer step of `step` was skipped for a non-finite gradient norm (AdamW
// skips such steps, so the weights stay finite but would never change
// again), a UserError "training diverged at step N ..." naming optim.lr.
// Some skipped steps, not all: a warning (when `warn`: world rank 0). Call
// it on every rank: the update's counts, and so the error, are the same.
void check_divergence(const Config& config, int64_t step, const UpdatePhaseResult& update, bool warn);

}  // namespace dapo::trainer
