// The forward/loss/backward loop over micro-batches and the optimizer step.
#include "dapo/trainer/update_step.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "dapo/core/error.h"

namespace dapo::trainer {

UpdateRunner::UpdateRunner(model::Qwen2Model& model, optim::AdamW* optimizer, const parallel::Grid& grid,
                           const ops::CudaDevice* gpu)
    : model_(model), optimizer_(optimizer), grid_(grid), gpu_(gpu) {
  DAPO_CHECK((gpu != nullptr) == (model.params().device() == Device::cuda), "UpdateRunner: parameters on ",
             device_name(model.params().device()), gpu ? " with a GPU" : " without a GPU");
  if (gpu && optimizer && grid.dp.size() > 1)
    buckets_ = optimizer->sharded()
                   ? std::make_unique<optim::GradBuckets>(model.params(), grid.dp, *gpu, optimizer->layout())
                   : std::make_unique<optim::GradBuckets>(model.params(), grid.dp, *gpu);
}

namespace {

// Device-side bytes per micro-batch beside the model's own activations:
// the packed i32 arrays and the (T) f32 log-prob, entropy and their
// gradients, each aligned.
size_t staging_bytes(int64_t T, int64_t B) {
  auto aligned = [](size_t b) { return (b + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign; };
  return aligned(size_t(3 * T + B + 1) * sizeof(int32_t)) + 4 * aligned(size_t(T) * sizeof(float)) + Arena::kAlign;
}

}  // namespace

UpdateRunner::ArenaBytes UpdateRunner::arena_bytes(const model::Qwen2Model::Plan& plan, int64_t T, int64_t B,
                                                   int64_t max_len, bool train, bool gpu, int threads) {
  ArenaBytes a;
  a.activations = train ? plan.train_activation_bytes(T) : plan.inference_activation_bytes(T);
  if (gpu) a.activations += staging_bytes(T, B);
  a.scratch = plan.scratch_bytes(T, max_len, 0, threads);
  return a;
}

void UpdateRunner::reserve(std::span<const MicroBatch> micro_batches, bool train) {
  int64_t T = 1, max_len = 1, B = 1;
  for (const MicroBatch& mb : micro_batches) {
    T = std::max(T, mb.num_tokens());
    B = std::max(B, mb.num_sequences());
    max_len = std::max(max_len, mb.max_sequence_length());
  }
  const ArenaBytes need = arena_bytes(model_.plan(), T, B, max_len, train, gpu_ != nullptr, omp_get_max_threads());
  const size_t act_bytes = need.activations, scratch_bytes = need.scratch;
  const Device device = model_.params().device();
  // A smaller arena (the old log-probs' before the update's) is freed before
  // the larger one is allocated: the two must never coexist, or the peak is
  // their sum, not what the memory plan counts (a 1.5B update without
  // recompute ran out of memory on an 80 GB H100 that way).
  if (!act_ || act_->capacity() < act_bytes) {
    act_.reset();
    act_ = std::make_unique<Arena>(act_bytes, device, "update-activations");
  }
  if (!scratch_ || scratch_->capacity() < scratch_bytes) {
    ctx_.scratch = nullptr;
    scratch_.reset();
    scratch_ = std::make_unique<Arena>(scratch_bytes, device, "update-scratch");
    ctx_ = gpu_ ? gpu_->ctx(scratch_.get()) : ops::Ctx{};
    ctx_.scratch = scratch_.get();
    ctx_.profiler = profiler_;
  }
}

void UpdateRunner::set_dp_bucket_bytes(size_t bytes) {
  // A sharded optimizer's buckets are its partition (ShardOptions::bucket_bytes).
  DAPO_CHECK(optimizer_ == nullptr || !optimizer_->sharded(),
             "set_dp_bucket_bytes: the sharded optimizer fixes its buckets (optim::ShardOptions::bucket_bytes)");
  if (buckets_) buckets_ = std::make_unique<optim::GradBuckets>(model_.params(), grid_.dp, *gpu_, bytes);
}

void UpdateRunner::release_memory() {
  act_.reset();
  scratch_.reset();
}

UpdateRunner::ArenaUse UpdateRunner::arena_use() const {
  ArenaUse u;
  if (act_) u.activations = act_->capacity(), u.activations_peak = act_->peak();
  if (scratch_) u.scratch = scratch_->capacity(), u.scratch_peak = scratch_->peak();
  return u;
}

model::PackedBatch UpdateRunner::stage_batch(const MicroBatch& mb) {
  model::PackedBatch host = mb.model_batch();
  host.max_seqlen = mb.max_sequence_length();
  if (!gpu_) return host;
  const int64_t T = mb.num_tokens(), B1 = int64_t(mb.cu_seqlens.size());
  std::vector<int32_t> packed;
  packed.reserve(size_t(3 * T + B1));
  for (const auto* v : {&mb.tokens, &mb.positions, &mb.targets, &mb.cu_seqlens})
    packed.insert(packed.end(), v->begin(), v->end());
  Tensor all = act_->alloc(DType::i32, {int64_t(packed.size())});
  gpu_->copy_to_device(all, tensor_i32(packed.data(), {int64_t(packed.size())}));
  model::PackedBatch d = host;
  d.tokens = all.slice_rows(0, T);
  d.positions = all.slice_rows(T, 2 * T);
  d.targets = all.slice_rows(2 * T, 3 * T);
  d.cu_seqlens = all.slice_rows(3 * T, 3 * T + B1);
  return d;
}

void UpdateRunner::upload(Tensor dst, const float* src) {
  if (!gpu_) {
    std::copy_n(src, dst.numel(), dst.ptr<float>());
    return;
  }
  gpu_->copy_to_device(dst, tensor_f32(const_cast<float*>(src), {dst.numel()}));
}

void UpdateRunner::download(float* dst, Tensor src) {
  if (!gpu_) {
    std::copy_n(src.ptr<float>(), src.numel(), dst);
    return;
  }
  gpu_->copy_to_host(tensor_f32(dst, {src.numel()}), src);
}

optim::StepReport UpdateRunner::step(std::span<const MicroBatch> micro_batches, const TokenGradient& gradient,
                                     double lr, const UpdateOptions& options) {
  DAPO_CHECK(optimizer_ != nullptr, "UpdateRunner::step on a scoring-only runner");
  reserve(micro_batches, true);
  model::ParamStore& params = model_.params();
  params.zero_grad();
  // The micro-batch whose backward feeds the dp buckets: the last one with
  // tokens (a rank may have none at all; it still takes part in the sum).
  size_t last = micro_batches.size();
  for (size_t m = 0; m < micro_batches.size(); ++m)
    if (micro_batches[m].num_tokens() > 0) last = m;
  if (buckets_) buckets_->begin();
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const MicroBatch& mb = micro_batches[m];
    const int64_t T = mb.num_tokens();
    if (T == 0) continue;
    ArenaScope staging(*act_);
    logprob_.assign(size_t(T), 0.0f);
    entropy_.assign(size_t(T), 0.0f);
    dlogprob_.assign(size_t(T), 0.0f);
    dentropy_.assign(options.entropy_gradient ? size_t(T) : 0, 0.0f);
    const model::PackedBatch batch = stage_batch(mb);
    // Outputs and upstream gradients live beside the batch (the host's own
    // vectors on the CPU backend).
    auto f32 = [&](std::vector<float>& host) {
      return gpu_ ? act_->alloc(DType::f32, {T}) : tensor_f32(host.data(), {T});
    };
    Tensor lp = f32(logprob_), en = f32(entropy_), dlp = f32(dlogprob_);
    Tensor den = options.entropy_gradient ? f32(dentropy_) : Tensor{};
    model::Activations saved;
    model_.forward_train(ctx_, *act_, batch, options.inv_temperature, lp, en, saved);
    if (gpu_) {
      download(logprob_.data(), lp);
      download(entropy_.data(), en);
    }
    gradient(mb, ForwardOutputs{logprob_, entropy_}, dlogprob_, dentropy_);
    if (gpu_) {
      upload(dlp, dlogprob_.data());
      if (den.data) upload(den, dentropy_.data());
    }
    model::Qwen2Model::GradsFinal final_hook;
    if (buckets_ && m == last) final_hook = [this](int64_t offset) { buckets_->ready(offset); };
    model_.backward(ctx_, *act_, saved, dlp, den, final_hook);
  }
  if (buckets_) buckets_->finish();
  // With buckets the dp sum (or reduce-scatter) is done.
  optim::StepComms comms;
  comms.dp = &grid_.dp;
  comms.tp = &grid_.tp;
  comms.dp_reduced = buckets_ != nullptr;
  comms.gpu = gpu_;
  const optim::StepReport r = optimizer_->step(ctx_, comms, lr);
  if (gpu_) gpu_->check_flags("update step");
  return r;
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
    ArenaScope staging(*act_);
    const model::PackedBatch batch = stage_batch(micro_batches[m]);
    Tensor lp = gpu_ ? act_->alloc(DType::f32, {T}) : tensor_f32(logprob[m].data(), {T});
    Tensor en = gpu_ ? act_->alloc(DType::f32, {T}) : tensor_f32(entropy[m].data(), {T});
    model_.forward_logprob(ctx_, *act_, batch, inv_temperature, lp, en);
    if (gpu_) {
      download(logprob[m].data(), lp);
      download(entropy[m].data(), en);
    }
  }
  if (gpu_) gpu_->check_flags("scoring");
}

}  // namespace dapo::trainer
