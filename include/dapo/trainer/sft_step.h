// The supervised warm start's training step: a global batch of
// train.train_batch_size prompt/response pairs, split over the dp ranks,
// packed into micro-batches of train.max_token_len_per_gpu tokens, and
// one AdamW step on the token-mean cross-entropy of the RESPONSE tokens:
//
//   loss = sum over response tokens of all dp ranks of -log p(token) / N,
//   N    = response tokens of the whole global batch (all dp ranks),
//
// the normaliser discipline of the DAPO loss (rl/policy_loss.h): gradients
// are summed over dp, so any dp and any micro-batch split take the same step.
// Prompt tokens, and the position after the response, are not in the loss.
//
// Batches: a PromptOrder over the examples (seed data.seed, a new shuffle
// per epoch) gives the global batch of each step; dp rank r takes positions
// [r*B/dp, (r+1)*B/dp) of it. The learning rate is optim/lr_schedule.h's
// warmup of optim.lr.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/prompt_order.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/metrics_writer.h"
#include "dapo/trainer/packing.h"
#include "dapo/trainer/sft_data.h"
#include "dapo/trainer/update_step.h"

namespace dapo::trainer {

// Appends prompt + response as one sequence whose mask selects the
// positions predicting response tokens (rl/response_tokens.h).
void add_sft_sequence(SequenceSet& set, const SftExample& example);

// The token-mean cross-entropy's gradient: dlogprob[t] = -mask[t] / N.
// Adds sum_t mask[t] * -logprob[t] / N to *loss (the micro-batch's share).
TokenGradient cross_entropy_gradient(int64_t global_response_tokens, double* loss);

struct SftStepResult {
  int64_t step = 0;             // 1-based number of this step
  double loss = 0;              // train/loss: before the update, over the global batch
  int64_t response_tokens = 0;  // N, global
  int64_t tokens = 0;           // prompt + response tokens, global
  int64_t micro_batches = 0;    // this rank's
  optim::StepReport report;     // actor/grad_norm, actor/lr
  double seconds = 0;           // wall time of the step

  // train/loss, actor/grad_norm, actor/lr, perf/throughput (tokens per second
  // per rank, verl's definition), timing_s/step, and counts.
  Metrics metrics(int64_t world_size) const;
};

class SftTrainer {
 public:
  // `examples`: the whole data set (the same on every rank). params, grid
  // and config must outlive the trainer. UserError for a batch size below
  // the dp size.
  // gpu: the rank's GPU when params live there (nullptr on the CPU backend).
  SftTrainer(model::ParamStore& params, const parallel::Grid& grid, const Config& config,
             std::vector<SftExample> examples, const ops::CudaDevice* gpu = nullptr);

  // Steps of the run: train.total_steps, or with 0 one epoch (examples /
  // train_batch_size, at least 1).
  int64_t planned_steps() const { return planned_steps_; }
  int64_t steps_done() const { return steps_done_; }

  // One training step. Collective over grid.world; the result is the same
  // on every rank.
  SftStepResult step();

  model::Qwen2Model& model() { return model_; }
  optim::AdamW& optimizer() { return optimizer_; }

 private:
  const parallel::Grid& grid_;
  const Config& config_;
  std::vector<SftExample> examples_;
  model::Qwen2Model model_;
  optim::AdamW optimizer_;
  UpdateRunner runner_;
  data::PromptOrder order_;
  int64_t planned_steps_ = 0;
  int64_t steps_done_ = 0;
};

}  // namespace dapo::trainer
