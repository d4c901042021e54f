// One SFT step: global batch -> this rank's share -> micro-batches ->
// cross-entropy gradients -> AdamW.
#include "dapo/trainer/sft_step.h"


#include "dapo/core/error.h"
#include "dapo/optim/lr_schedule.h"
#include "dapo/rl/response_tokens.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/timing.h"

namespace dapo::trainer {
namespace {

// SFT samples nothing: rollout.exact_logprobs (a base config's) has nothing
// to make exact, and would only slow the products or refuse a GPU.
model::ModelOptions sft_model_options(const Config& config) {
  model::ModelOptions o = model_options(config);
  o.batch_invariant = false;
  return o;
}

}  // namespace

void add_sft_sequence(SequenceSet& set, const SftExample& example) {
  const int64_t P = int64_t(example.prompt_ids.size()), R = int64_t(example.response_ids.size());
  std::vector<int32_t> tokens(example.prompt_ids);
  tokens.insert(tokens.end(), example.response_ids.begin(), example.response_ids.end());
  std::vector<uint8_t> mask(size_t(P + R));
  rl::fill_response_mask(P, R, true, mask);
  set.add(tokens, mask);
}

TokenGradient cross_entropy_gradient(int64_t global_response_tokens, double* loss) {
  DAPO_CHECK(global_response_tokens > 0, "no response token in the batch");
  const double inv_n = 1.0 / double(global_response_tokens);
  return [inv_n, loss](const MicroBatch& mb, const ForwardOutputs& out, std::span<float> dlogprob,
                       std::span<float>) {
    double sum = 0;
    for (size_t t = 0; t < mb.mask.size(); ++t) {
      if (!mb.mask[t]) continue;
      sum -= double(out.logprob[t]);
      dlogprob[t] = float(-inv_n);
    }
    *loss += sum * inv_n;
  };
}

Metrics SftStepResult::metrics(int64_t world_size) const {
  Metrics m;
  m.add("train/loss", loss)
      .add("actor/grad_norm", report.grad_norm)
      .add("actor/lr", report.lr)
      .add("perf/throughput", seconds > 0 ? double(tokens) / seconds / double(world_size) : 0.0)
      .add("perf/total_num_tokens", tokens)
      .add("train/response_tokens", response_tokens)
      .add("timing_s/step", seconds);
  return m;
}

SftTrainer::SftTrainer(model::ParamStore& params, const parallel::Grid& grid, const Config& config,
                       std::vector<SftExample> examples, const ops::CudaDevice* gpu)
    : grid_(grid),
      config_(config),
      examples_(std::move(examples)),
      model_(params, grid.tp, sft_model_options(config)),
      optimizer_(params, optim::adamw_options(config.optim), optim::shard_options(config.optim, grid.dp)),
      runner_(model_, &optimizer_, grid, gpu),
      order_(int64_t(examples_.size()), uint64_t(config.data.seed)) {
  const int64_t B = config.train.train_batch_size;
  if (B < grid.dp_size)
    throw UserError(cat(config.origin_of("train.train_batch_size"), ": train.train_batch_size = ", B,
                        " is smaller than the ", grid.dp_size, " data-parallel ranks"));
  planned_steps_ = config.train.total_steps > 0 ? config.train.total_steps
                                                : std::max<int64_t>(1, int64_t(examples_.size()) / B);
}

SftStepResult SftTrainer::step() {
  const auto start = Clock::now();
  const int64_t B = config_.train.train_batch_size;
  const std::vector<int64_t> batch = order_.next_batch(B);
  const int64_t dp = grid_.dp_size, r = grid_.dp_rank;
  SequenceSet mine;
  for (int64_t i = r * B / dp; i < (r + 1) * B / dp; ++i) add_sft_sequence(mine, examples_[size_t(batch[size_t(i)])]);
  const std::vector<MicroBatch> micro = pack_micro_batches(mine, config_.train.max_token_len_per_gpu);

  std::vector<int64_t> counts{0, mine.total_tokens()};
  for (const MicroBatch& mb : micro) counts[0] += mb.mask_tokens();
  grid_.dp.all_reduce_i64(counts, parallel::ReduceOp::sum);

  SftStepResult res;
  res.step = steps_done_ + 1;
  res.response_tokens = counts[0];
  res.tokens = counts[1];
  res.micro_batches = int64_t(micro.size());
  double loss = 0;
  const double lr = optim::warmup_lr(config_.optim, steps_done_);
  res.report = runner_.step(micro, cross_entropy_gradient(res.response_tokens, &loss), lr);
  // The tp ranks of a dp group computed the same loss: sum over dp only.
  res.loss = grid_.dp.all_reduce_f64(loss, parallel::ReduceOp::sum);
  ++steps_done_;
  res.seconds = root_seconds_since(grid_.world, start);
  return res;
}

}  // namespace dapo::trainer
