// One optimizer step over packed micro-batches, with the loss left to the
// caller: for each micro-batch, forward_train gives per-token log-probs
// (and entropies), the caller's TokenGradient turns them into dloss/dlogprob
// (and dloss/dentropy), the backward accumulates parameter gradients; then
// AdamW reduces them over dp (SUM), clips by the global norm and updates.
// The SFT cross-entropy and the DAPO policy loss are two TokenGradients.
//
// Normalisers: because gradients are SUMMED over dp, a TokenGradient must
// already divide by the GLOBAL count of its (mini-)batch (all micro-batches
// of all dp ranks), e.g. dlogprob = -mask / N_global for token-mean
// cross-entropy; then the step is the same on any dp and any micro-batch
// split (rl/policy_loss.h).
//
// Memory: the runner owns the activation arena and the ops' scratch arena,
// sized for the largest micro-batch it has seen (grown, never shrunk, before
// a step starts: no allocation inside the micro-batch loop).
//
// On a GPU (the ParamStore on the device, `gpu` given) the arenas are
// device memory and every op runs on the GPU's stream. Per micro-batch the
// packed token arrays go up in one host-to-device copy, the per-token
// log-probs and entropies come back for the TokenGradient (a host
// function: the loss needs rollout data the host holds), and its gradients
// go up again; the device flags are checked once per step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/context.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/optim/adamw.h"
#include "dapo/optim/grad_buckets.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/packing.h"

namespace dapo::trainer {

// What the forward gave for one micro-batch: (T) each, the same on every tp rank.
struct ForwardOutputs {
  std::span<const float> logprob;  // log pi(targets[t]) under softmax(logits * inv_temperature)
  std::span<const float> entropy;
};

// Fills dlogprob (T) and, when entropy gradients were asked for, dentropy
// (T; otherwise empty) with the micro-batch's share of dloss/d(output).
// Both arrive zeroed. Whatever the caller sums (loss, metrics) it keeps in
// its own captures.
using TokenGradient = std::function<void(const MicroBatch& mb, const ForwardOutputs& out,
                                         std::span<float> dlogprob, std::span<float> dentropy)>;

struct UpdateOptions {
  float inv_temperature = 1.0f;  // 1 / rollout.temperature for the DAPO update
  bool entropy_gradient = false;  // the loss has an entropy term (entropy_coeff != 0)
};

class UpdateRunner {
 public:
  // model and optimizer share one ParamStore; grid gives the dp and tp
  // groups of the optimizer step. All must outlive the runner. A runner
  // without an optimizer (nullptr: a frozen reference model) only scores.
  UpdateRunner(model::Qwen2Model& model, optim::AdamW* optimizer, const parallel::Grid& grid,
               const ops::CudaDevice* gpu = nullptr);

  // Zeroes the gradients, runs every micro-batch (forward, loss gradient,
  // backward) and takes one optimizer step with learning rate `lr`.
  // Collective over grid.world (each rank passes its own micro-batches; a
  // rank may have none).
  optim::StepReport step(std::span<const MicroBatch> micro_batches, const TokenGradient& gradient, double lr,
                         const UpdateOptions& options = {});

  // Log-probs and entropies without gradients (the DAPO update's old
  // log-probs, evaluation). logprob[m] and entropy[m] are resized to
  // micro-batch m's tokens and overwritten. Collective over grid.tp.
  void score(std::span<const MicroBatch> micro_batches, float inv_temperature,
             std::vector<std::vector<float>>& logprob, std::vector<std::vector<float>>& entropy);

  const ops::Ctx& ctx() const { return ctx_; }
  // Benchmarks: per-op GPU times of the following steps (nullptr: off).
  void set_profiler(ops::OpProfiler* profiler) {
    profiler_ = profiler;
    ctx_.profiler = profiler;
  }
  // The size of the dp gradient buckets on a GPU (optim/grad_buckets.h;
  // default 64 MiB). Collective in effect: every dp rank must set the same.
  // Unsharded optimizers only: a sharded one fixes its buckets.
  void set_dp_bucket_bytes(size_t bytes);
  // The dp gradient buckets (GPU with dp > 1; nullptr otherwise): tests
  // see how many the last step launched during the backward.
  const optim::GradBuckets* dp_buckets() const { return buckets_.get(); }
  // The arenas' sizes and high-water marks (bytes), for memory reports.
  struct ArenaUse {
    size_t activations = 0, activations_peak = 0, scratch = 0, scratch_peak = 0;
  };
  ArenaUse arena_use() const;
  // The arenas' sizes for micro-batches of at most T tokens in B sequences,
  // the longest max_len: what reserve() carves (train: forward + backward;
  // else scoring), on a GPU with its device-side staging of the batch.
  struct ArenaBytes {
    size_t activations = 0, scratch = 0;
  };
  static ArenaBytes arena_bytes(const model::Qwen2Model::Plan& plan, int64_t T, int64_t B, int64_t max_len,
                                bool train, bool gpu, int threads);
  // Frees the activation and scratch arenas, so that another phase (the
  // engine's KV pool) can have the memory; the next step or score makes
  // them again, as large as it needs.
  void release_memory();

 private:
  // The model's view of micro-batch mb: its host arrays, or (GPU) device
  // copies carved from the activation arena, made with one copy.
  model::PackedBatch stage_batch(const MicroBatch& mb);
  // Host -> device (or host) copy of n floats into `dst`, and back.
  void upload(Tensor dst, const float* src);
  void download(float* dst, Tensor src);
  // Makes the arenas large enough for these micro-batches.
  void reserve(std::span<const MicroBatch> micro_batches, bool train);

  model::Qwen2Model& model_;
  optim::AdamW* optimizer_;
  const parallel::Grid& grid_;
  const ops::CudaDevice* gpu_;
  std::unique_ptr<Arena> act_, scratch_;
  std::unique_ptr<optim::GradBuckets> buckets_;
  ops::OpProfiler* profiler_ = nullptr;  // GPU with dp > 1: the overlapped dp sum
  ops::Ctx ctx_;
  std::vector<float> logprob_, entropy_, dlogprob_, dentropy_;  // (T) of the current micro-batch
};

}  // namespace dapo::trainer
