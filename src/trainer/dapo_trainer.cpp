// DapoTrainer: generation phase -> update phase -> metrics.
#include <cstdint>
#include "dapo/trainer/dapo_trainer.h"


#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/optim/lr_schedule.h"
#include "dapo/rollout/model_source.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/step_metrics.h"
#include "dapo/trainer/timing.h"

namespace dapo::trainer {

DapoTrainer::DapoTrainer(model::ParamStore& params, std::unique_ptr<model::ParamStore> reference,
                         const parallel::Grid& grid, const Config& config, const data::Tokenizer& tokenizer,
                         const PromptSet& prompts, const ops::CudaDevice* gpu)
    : grid_(grid),
      config_(config),
      prompts_(prompts),
      gpu_(gpu),
      engine_scratch_(0, gpu ? Device::cuda : Device::cpu, "unused"),
      model_(params, grid.tp, model_options(config)),
      optimizer_(params, optim::adamw_options(config.optim), optim::shard_options(config.optim, grid.dp)),
      actor_(model_, &optimizer_, grid, gpu),
      ref_params_(std::move(reference)),
      engine_(model_, grid.tp, gpu ? gpu->ctx(&engine_scratch_) : ops::Ctx{}, rollout::engine_options(config)),
      order_(prompts.size(), uint64_t(config.data.seed)),
      eos_ids_(rollout::response_eos_ids(&tokenizer, params.config())),
      rewards_(reward_settings(config, tokenizer)) {
  DAPO_CHECK((config.algorithm.kl_coef > 0) == (ref_params_ != nullptr),
             "a reference model is needed exactly when algorithm.kl_coef > 0");
  if (ref_params_) {
    ref_model_ = std::make_unique<model::Qwen2Model>(*ref_params_, grid.tp, model::ModelOptions{});
    ref_runner_ = std::make_unique<UpdateRunner>(*ref_model_, nullptr, grid, gpu);
  }
  if (eos_ids_.empty())
    throw UserError("the tokenizer has no <|im_end|> or <|endoftext|> and the model's config.json names no "
                    "eos_token_id: responses could never end before rollout.max_response_length");
  // The engine records each token's log-prob under the full softmax (the
  // trainer's old log-prob is that too); truncated sampling draws from
  // another distribution, so the ratios would be off-policy.
  if (grid.world_rank() == 0 && (config.rollout.top_p < 1 || config.rollout.top_k > 0))
    DAPO_WARN("rollout.top_p = ", config.rollout.top_p, ", rollout.top_k = ", config.rollout.top_k,
              ": training answers are drawn from a truncated distribution while their log-probs (the engine's, "
              "rollout_corr/*, and the old log-probs of the loss) are the full softmax's, so the importance "
              "ratios are biased; the DAPO recipe trains at top_p = 1, top_k = -1 (truncate only the validation "
              "with val_top_p / val_top_k)");
}

void DapoTrainer::restore(int64_t steps_done, const data::PromptOrderState& order, const std::string& origin) {
  DAPO_CHECK(steps_done >= 0, "restore: steps_done ", steps_done);
  order_.restore(order, origin);
  steps_done_ = steps_done;
}

void DapoTrainer::pin_kv_cache_cap() {
  if (engine_.stats().kv_cache_cap_lowered && !cap_lowered_warned_) {
    cap_lowered_warned_ = true;
    DAPO_WARN("rollout: the KV pool's pinned memory cap (", engine_.options().kv_cache_cap_bytes,
              " bytes: this run's first step, or its checkpoint) is more than this ", gpu_ ? "GPU" : "host",
              " gives now: the pool follows the memory (", engine_.stats().kv_cache_cap_bytes,
              " bytes), and the schedules may differ from the saved run's (said once)");
  }
  const rollout::EngineOptions& o = engine_.options();
  if (o.kv_cache_bytes > 0 || o.kv_cache_cap_bytes > 0) return;  // the same on every rank
  const size_t mine = engine_.stats().kv_cache_cap_bytes;
  const int64_t agreed = grid_.world.all_reduce_i64(mine > 0 ? int64_t(mine) : INT64_MAX, parallel::ReduceOp::min);
  if (agreed != INT64_MAX) engine_.pin_kv_cache_cap(size_t(agreed));
}

void DapoTrainer::restore_kv_cache_cap(int64_t bytes) {
  if (bytes > 0 && engine_.options().kv_cache_bytes == 0) engine_.pin_kv_cache_cap(size_t(bytes));
}

DapoStepResult DapoTrainer::step() {
  const auto start = Clock::now();
  DapoStepResult res;
  res.step = steps_done_ + 1;

  GenerationContext gen;
  gen.engine = &engine_;
  gen.prompts = &prompts_;
  gen.order = &order_;
  gen.rewards = rewards_;
  gen.sampling = rollout::sampling_options(config_, eos_ids_, 0);
  gen.gen_batch_size = config_.rollout.gen_batch_size;
  gen.mini_batch_groups = config_.train.ppo_mini_batch_size;
  gen.dynamic_sampling = rl::dynamic_sampling_options(config_);
  gen.progress = progress_;
  if (watchdog_) watchdog_->enter("generate", res.step);
  res.generation = run_generation_phase(gen, grid_, res.step);
  if (gpu_) gpu_->check_flags("generation");
  pin_kv_cache_cap();
  if (res.generation.sampler.status() == rl::SamplingStatus::short_batch && grid_.world_rank() == 0)
    DAPO_WARN("step ", res.step, ": ", res.generation.sampler.short_batch_message());
  if (watchdog_) watchdog_->enter("update", res.step);

  std::vector<int64_t> mini_batch;
  for (const int64_t i : res.generation.selection_index) mini_batch.push_back(res.generation.plan.mini_batch[size_t(i)]);
  const UpdatePhaseContext upd = update_phase_context(config_, actor_, ref_runner_.get());
  const double lr = optim::warmup_lr(config_.optim, steps_done_);
  res.update = run_update_phase(upd, grid_, res.generation.groups, mini_batch,
                                res.generation.plan.num_mini_batches(), lr);
  if (gpu_) gpu_->check_flags("update");
  // The next generation's KV pool gets the activations' memory.
  last_update_memory_ = actor_.arena_use();
  actor_.release_memory();
  if (ref_runner_) ref_runner_->release_memory();
  ++steps_done_;

  res.seconds = root_seconds_since(grid_.world, start);
  res.metrics = dapo_step_metrics(config_, grid_, res.generation, res.update, res.seconds);
  return res;
}

void check_divergence(const Config& config, int64_t step, const UpdatePhaseResult& update, bool warn) {
  if (update.skipped_steps == 0) return;
  if (update.skipped_steps < update.optimizer_steps) {
    if (warn)
      DAPO_WARN("step ", step, ": ", update.skipped_steps, " of ", update.optimizer_steps,
                " optimizer steps skipped (non-finite loss or gradient norm)");
    return;
  }
  // The loss's own coefficients are named beside the learning rate when set:
  // a large entropy bonus or KL weight overflows the loss on its own.
  std::string knobs = cat("optim.lr (now ", config.optim.lr, ", ", config.origin_of("optim.lr"), ")");
  if (config.algorithm.entropy_coeff != 0)
    knobs += cat(" or algorithm.entropy_coeff (now ", config.algorithm.entropy_coeff, ", ",
                 config.origin_of("algorithm.entropy_coeff"), ")");
  if (config.algorithm.kl_coef != 0)
    knobs += cat(" or algorithm.kl_coef (now ", config.algorithm.kl_coef, ", ", config.origin_of("algorithm.kl_coef"),
                 ")");
  throw UserError(cat("training diverged at step ", step, ": the loss or gradient norm was non-finite in all ",
                      update.optimizer_steps, " optimizer steps, so the weights can no longer change; lower ", knobs,
                      " and resume from the last checkpoint (nothing of this step is saved)"));
}

}  // namespace dapo::trainer
