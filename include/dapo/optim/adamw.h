// The optimizer of the update: AdamW over a ParamStore's flat fp32 master
// buffer (docs/DESIGN.md sections 2 phase 8 and 3b), with torch.optim.AdamW's
// semantics as verl's FSDP actor uses it:
//  - weight decay (decoupled) on EVERY parameter, norms and biases
//    included: verl builds AdamW over module.parameters() with one
//    weight_decay and no exclusions;
//  - per mini-batch: gradients summed over dp (grad_norm.h), the global
//    grad norm over tp, clipping by optim.grad_clip with
//    torch.nn.utils.clip_grad_norm_'s factor min(1, clip / (norm + 1e-6)),
//    and a skipped step when the norm is not finite (verl's dp_actor: warn,
//    no update); then one ops::adamw_step over the whole buffer with the
//    clip factor folded into grad_scale;
//  - the learning rate comes from the caller (lr_schedule.h: it depends on
//    the training step, not on the optimizer steps taken).
//
// State: exp_avg and exp_avg_sq are two fp32 buffers with the master
// buffer's layout (same offsets, zero padding), on the store's device, with
// named views for checkpoints, and the count of steps taken (bias
// correction), which a checkpoint must save with them: it is smaller than
// the number of mini-batches when steps were skipped.
//
// Sharding over dp (ZeRO-1, optim.shard_optimizer; shard_layout.h): with
// ShardOptions::dp of more than one rank, each dp rank updates only its
// shard of the flat buffer. Its moments are two compact fp32 buffers of the
// shard's size; on a GPU the store's fp32 master becomes the shard too
// (ParamStore::shard_master, at construction; the store stays sharded).
// A step then: gradients reduce-scattered bucket by bucket into the shards
// (or already, by GradBuckets during the backward); the norm's squares per
// shard, gathered over dp and added in rank order (the same bits on every
// rank), then summed over tp as before; the same clip and skip; AdamW over
// the shard's spans; the updated weights all-gathered per bucket (the bf16
// compute copy on a GPU, the fp32 master on the CPU). The update of each
// element is the unsharded one; with dp = 2 the reduced gradients are too
// (a + b), and the norm may differ in the last bits (float partial sums
// per span instead of per run), so the weights match bit for bit when the
// step does not clip, and to fp32 rounding of the clip factor when it does.
//
// Ownership: the optimizer owns its two buffers; the ParamStore (and the
// dp Comm of ShardOptions) must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dapo/core/config.h"
#include "dapo/model/param_store.h"
#include "dapo/ops/context.h"
#include "dapo/optim/shard_layout.h"

namespace dapo::parallel {
class Comm;
}
namespace dapo::ops {
class CudaDevice;
struct AdamWParams;
}

namespace dapo::optim {

struct AdamWOptions {
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0: no clipping
};
AdamWOptions adamw_options(const OptimConfig& config);

struct ShardOptions {
  // The data-parallel group to shard the optimizer over; nullptr or one
  // rank: no sharding (every rank updates the whole buffer).
  const parallel::Comm* dp = nullptr;
  // The dp gradient buckets (shard_layout.h); fixed for the optimizer's life.
  size_t bucket_bytes = kDefaultBucketBytes;
};
// config.shard_optimizer ? dp : none.
ShardOptions shard_options(const OptimConfig& config, const parallel::Comm& dp);

// What one step did (the trainer's actor/grad_norm, actor/lr metrics).
struct StepReport {
  double lr = 0;
  double grad_norm = 0;   // global, before clipping
  double clip_coef = 1;   // factor the gradients were scaled by (1: not clipped; 0: skipped)
  bool skipped = false;   // non-finite grad norm: nothing was updated
  int64_t steps_taken = 0;  // after this step
};

// The data-parallel and tensor-parallel groups of this rank; nullptr (or a
// size-1 Comm) for none.
struct StepComms {
  const parallel::Comm* dp = nullptr;
  const parallel::Comm* tp = nullptr;
  // The dp reduction is done already (GradBuckets during the backward:
  // all-reduced, or reduce-scattered into the shards when sharded).
  bool dp_reduced = false;
  // Sharded on a GPU: the all-gathers of the updated weights run on its
  // communication stream, each bucket's overlapping the next bucket's
  // update; nullptr: on ctx.stream.
  const ops::CudaDevice* gpu = nullptr;
};

class AdamW {
 public:
  AdamW(model::ParamStore& params, const AdamWOptions& options, const ShardOptions& shard = {});
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One optimizer step from the gradients accumulated in params (collective
  // over comms.dp and comms.tp): reduce over dp, norm, clip, update. The
  // gradient buffer holds the dp-summed, UNclipped gradients afterwards
  // (the clip factor is applied inside the update) - sharded: in this
  // rank's shard only; zeroing it for the next mini-batch is the caller's.
  // lr >= 0. Sharded, the dp group is the ShardOptions' (comms.dp, if
  // given, must be the same size).
  StepReport step(const ops::Ctx& ctx, const StepComms& comms, double lr);

  const AdamWOptions& options() const { return options_; }
  bool sharded() const { return layout_ != nullptr; }
  // The partition (sharded only).
  const ShardLayout& layout() const;
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps);  // restoring a checkpoint; >= 0

  // Flat buffers (padding included), layout of params.parameters();
  // sharded: the compact shard (layout().ranges() say where each span is).
  Tensor exp_avg() const;
  Tensor exp_avg_sq() const;
  // This rank's slice of one tensor's moments (shape of params.param(name)).
  // Unsharded only.
  Tensor exp_avg(const std::string& name) const;
  Tensor exp_avg_sq(const std::string& name) const;
  // Host copies in and out of one tensor's moments (this rank's tp slice,
  // `n` elements each), for checkpoints on any device. load_local keeps
  // the part of the shard (not collective). read_local: sharded, a
  // collective gather over dp (every rank gets the slice).
  void load_local(const std::string& name, const float* exp_avg, const float* exp_avg_sq, int64_t n);
  void read_local(const std::string& name, float* exp_avg, float* exp_avg_sq, int64_t n) const;
  // Sharded: collective over dp, the slice gathered to dp rank `root` only
  // (root < 0: every rank; elsewhere the outputs may be nullptr). The
  // checkpoint writer's path. Unsharded: read_local where outputs are given.
  void gather_local(const std::string& name, float* exp_avg, float* exp_avg_sq, int64_t n, int root) const;

 private:
  void sharded_step(const ops::Ctx& ctx, const StepComms& comms, const ops::AdamWParams& p);

  model::ParamStore& params_;
  AdamWOptions options_;
  int64_t steps_ = 0;
  const parallel::Comm* dp_ = nullptr;   // sharded: the group
  std::unique_ptr<ShardLayout> layout_;  // sharded only
  model::ShardMap map_;                  // sharded: every rank's spans
  int64_t state_elements_ = 0;           // of each moment buffer
  float* exp_avg_ = nullptr;     // (state_elements_) f32
  float* exp_avg_sq_ = nullptr;  // (state_elements_) f32
};

}  // namespace dapo::optim
