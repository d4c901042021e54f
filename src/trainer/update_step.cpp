// The forward/loss/backward loop over micro-batches and the optimizer step.
#include "dapo/trainer/update_step.h"

#include <omp.h>

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::trainer {

UpdateRunner::UpdateRunner(model::Qwen2Model& model, optim::AdamW* optimizer, const parallel::Grid& grid)
    : model_(model), optimizer_(optimizer), grid_(grid) {}

void UpdateRunner::reserve(std::span<const MicroBatch> micro_batches, bool train) {
  int64_t T = 1, max_len = 1;
  for (const MicroBatch& mb : micro_batches) {
    T = std::max(T, mb.num_tokens());
    max_len = std::max(max_len, mb.max_sequence_length());
  }
  const size_t act_bytes = train ? model_.train_activation_bytes(T) : model_.inference_activation_bytes(T);
  const size_t scratch_bytes = model_.scratch_bytes(T, max_len, 0, omp_get_max_threads());
  const Device device = model_.params().device();
  if (!act_ || act_->capacity() < act_bytes) act_ = std::make_unique<Arena>(act_bytes, device, "update-activations");
  if (!scratch_ || scratch_->capacity() < scratch_bytes) {
    scratch_ = std::make_unique<Arena>(scratch_bytes, device, "update-scratch");
    ctx_.scratch = scratch_.get();
  }
}

optim::StepReport UpdateRunner::step(std::span<const MicroBatch> micro_batches, const TokenGradient& gradient,
                                     double lr, const UpdateOptions& options) {
  DAPO_CHECK(optimizer_ != nullptr, "UpdateRunner::step on a scoring-only runner");
  reserve(micro_batches, true);
  model::ParamStore& params = model_.params();
  params.zero_grad();
  for (const MicroBatch& mb : micro_batches) {
    const int64_t T = mb.num_tokens();
    if (T == 0) continue;
    logprob_.assign(size_t(T), 0.0f);
    entropy_.assign(size_t(T), 0.0f);
    dlogprob_.assign(size_t(T), 0.0f);
    dentropy_.assign(options.entropy_gradient ? size_t(T) : 0, 0.0f);
    model::Activations saved;
    model_.forward_train(ctx_, *act_, mb.model_batch(), options.inv_temperature, tensor_f32(logprob_.data(), {T}),
                         tensor_f32(entropy_.data(), {T}), saved);
    gradient(mb, ForwardOutputs{logprob_, entropy_}, dlogprob_, dentropy_);
    model_.backward(ctx_, *act_, saved, tensor_f32(dlogprob_.data(), {T}),
                    options.entropy_gradient ? tensor_f32(dentropy_.data(), {T}) : Tensor{});
  }
  return optimizer_->step(ctx_, optim::StepComms{&grid_.dp, &grid_.tp}, lr);
}

void UpdateRunner::score(std::span<const MicroBatch> micro_batches, float inv_temperature,
                         std::vector<std::vector<float>>& logprob, std::vector<std::vector<float>>& entropy) {
  reserve(micro_batches, false);
  logprob.resize(micro_batches.size());
  entropy.resize(micro_batches.size());
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const int64_t T = micro_batches[m].num_tokens();
    logprob[m].assign(size_t(T), 0.0f);
    entropy[m].assign(size_t(T), 0.0f);
    if (T == 0) continue;
    model_.forward_logprob(ctx_, *act_, micro_batches[m].model_batch(), inv_temperature,
                           tensor_f32(logprob[m].data(), {T}), tensor_f32(entropy[m].data(), {T}));
  }
}

}  // namespace dapo::trainer
