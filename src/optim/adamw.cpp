// AdamW over the flat master buffer: dp reduction, global-norm clipping,
// non-finite skip, one fused update (adamw.h); sharded over dp (ZeRO-1).
#include "dapo/optim/adamw.h"

#include <bit>
#include <cmath>

#include "dapo/core/arena.h"
#include "dapo/core/error.h"
#include "dapo/ops/adamw.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/optim/grad_norm.h"
#include "dapo/parallel/comm.h"
#include "device_memory.h"

namespace dapo::optim {

AdamWOptions adamw_options(const OptimConfig& c) {
  AdamWOptions o;
  o.weight_decay = c.weight_decay;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  o.grad_clip = c.grad_clip;
  return o;
}

ShardOptions shard_options(const OptimConfig& c, const parallel::Comm& dp) {
  ShardOptions s;
  if (c.shard_optimizer) s.dp = &dp;
  return s;
}

AdamW::AdamW(model::ParamStore& params, const AdamWOptions& options, const ShardOptions& shard)
    : params_(params), options_(options) {
  DAPO_CHECK(options.weight_decay >= 0 && options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 &&
                 options.beta2 < 1 && options.eps > 0 && options.grad_clip >= 0,
             "AdamW options: weight_decay ", options.weight_decay, " betas ", options.beta1, " ", options.beta2,
             " eps ", options.eps, " grad_clip ", options.grad_clip);
  state_elements_ = params.buffer_elements();
  if (shard.dp != nullptr && shard.dp->size() > 1) {
    dp_ = shard.dp;
    layout_ = std::make_unique<ShardLayout>(params.buffer_elements(), dp_->size(), dp_->rank(), shard.bucket_bytes);
    map_ = layout_->map(*dp_);
    state_elements_ = layout_->shard_elements();
    if (params.device() != Device::cpu) {
      // The store's fp32 master becomes this shard (a second optimizer over
      // a sharded store must shard it the same way).
      if (params.master_sharded())
        DAPO_CHECK(params.master_shards().ranks == map_.ranks,
                   "AdamW: the store's master is sharded another way (other bucket_bytes or dp)");
      else
        params.shard_master(map_);
    }
  } else {
    DAPO_CHECK(!params.master_sharded(), "AdamW without sharding over a store whose master is sharded");
  }
  const size_t bytes = size_t(state_elements_) * sizeof(float);
  exp_avg_ = static_cast<float*>(memory_alloc(params.device(), bytes));
  exp_avg_sq_ = static_cast<float*>(memory_alloc(params.device(), bytes));
  detail::fill_zero(params.device(), params.stream(), exp_avg_, state_elements_);
  detail::fill_zero(params.device(), params.stream(), exp_avg_sq_, state_elements_);
}

AdamW::~AdamW() {
  memory_free(params_.device(), exp_avg_);
  memory_free(params_.device(), exp_avg_sq_);
}

const ShardLayout& AdamW::layout() const {
  DAPO_CHECK(layout_ != nullptr, "AdamW::layout(): the optimizer is not sharded");
  return *layout_;
}

void AdamW::set_steps_taken(int64_t steps) {
  DAPO_CHECK(steps >= 0, "AdamW steps ", steps);
  steps_ = steps;
}

Tensor AdamW::exp_avg() const { return Tensor(exp_avg_, DType::f32, {state_elements_}, params_.device()); }
Tensor AdamW::exp_avg_sq() const { return Tensor(exp_avg_sq_, DType::f32, {state_elements_}, params_.device()); }

Tensor AdamW::exp_avg(const std::string& name) const {
  DAPO_CHECK(!sharded(), "AdamW::exp_avg(", name, "): the moments are sharded over dp");
  const model::ParamEntry& e = params_.entry(name);
  return model::shaped_view(exp_avg_ + e.offset, e.slice.local_shape, params_.device());
}
Tensor AdamW::exp_avg_sq(const std::string& name) const {
  DAPO_CHECK(!sharded(), "AdamW::exp_avg_sq(", name, "): the moments are sharded over dp");
  const model::ParamEntry& e = params_.entry(name);
  return model::shaped_view(exp_avg_sq_ + e.offset, e.slice.local_shape, params_.device());
}

void AdamW::load_local(const std::string& name, const float* m, const float* v, int64_t n) {
  const model::ParamEntry& e = params_.entry(name);
  DAPO_CHECK(n == e.param.numel(), name, ": ", n, " optimizer-state elements given, this rank's slice has ",
             e.param.numel());
  if (!sharded()) {
    detail::copy_from_host(params_.stream(), params_.device(), exp_avg_ + e.offset, m, n);
    detail::copy_from_host(params_.stream(), params_.device(), exp_avg_sq_ + e.offset, v, n);
    return;
  }
  for (const model::ShardRange& r : model::overlaps_of(layout_->ranges(), e.offset, e.offset + n)) {
    const int64_t k = r.begin - e.offset, len = r.end - r.begin;
    detail::copy_from_host(params_.stream(), params_.device(), exp_avg_ + r.shard_offset, m + k, len);
    detail::copy_from_host(params_.stream(), params_.device(), exp_avg_sq_ + r.shard_offset, v + k, len);
  }
}

void AdamW::read_local(const std::string& name, float* m, float* v, int64_t n) const {
  const model::ParamEntry& e = params_.entry(name);
  DAPO_CHECK(n == e.param.numel(), name, ": room for ", n, " optimizer-state elements, this rank's slice has ",
             e.param.numel());
  if (sharded()) return gather_local(name, m, v, n, -1);
  detail::copy_to_host(params_.stream(), params_.device(), m, exp_avg_ + e.offset, n);
  detail::copy_to_host(params_.stream(), params_.device(), v, exp_avg_sq_ + e.offset, n);
}

void AdamW::gather_local(const std::string& name, float* m, float* v, int64_t n, int root) const {
  const model::ParamEntry& e = params_.entry(name);
  if (!sharded()) {
    if (m != nullptr) read_local(name, m, v, n);
    return;
  }
  const bool receives = root < 0 || root == dp_->rank();
  DAPO_CHECK(!receives || (m != nullptr && v != nullptr), name, ": nowhere to gather the moments to");
  DAPO_CHECK(!receives || n == e.param.numel(), name, ": room for ", n,
             " optimizer-state elements, this rank's slice has ", e.param.numel());
  model::gather_shards(map_, e.offset, e.param.numel(), {exp_avg_, exp_avg_sq_},
                       {receives ? m : nullptr, receives ? v : nullptr}, root, params_.device(), params_.stream());
}

StepReport AdamW::step(const ops::Ctx& ctx, const StepComms& comms, double lr) {
  DAPO_CHECK(lr >= 0 && std::isfinite(lr), "AdamW lr ", lr);
  StepReport r;
  r.lr = lr;
  if (sharded()) {
    DAPO_CHECK(comms.dp == nullptr || comms.dp->size() == dp_->size(), "AdamW: sharded over ", dp_->size(),
               " dp ranks, stepped with a dp group of ", comms.dp->size());
    if (!comms.dp_reduced)
      for (const Bucket& b : layout_->buckets()) reduce_scatter_bucket(*layout_, *dp_, params_.gradients(), b, ctx.stream);
    // Each shard's squares; the dp partials are gathered (as bits) and
    // added in rank order, so every rank gets the same sum.
    const double local = local_grad_sum_squares(ctx, params_, layout_->ranges());
    double dp_sum = 0;
    for (const int64_t bits : dp_->all_gather_i64(std::bit_cast<int64_t>(local))) dp_sum += std::bit_cast<double>(bits);
    DAPO_CHECK(comms.tp != nullptr || params_.tp_size() == 1, "a tp-split ParamStore needs its tp Comm for the norm");
    const double total =
        comms.tp != nullptr && comms.tp->size() > 1 ? comms.tp->all_reduce_f64(dp_sum, parallel::ReduceOp::sum) : dp_sum;
    r.grad_norm = std::sqrt(total);
  } else {
    if (!comms.dp_reduced) all_reduce_gradients(comms.dp, params_);
    r.grad_norm = global_grad_norm(ctx, params_, comms.tp);
  }
  if (!std::isfinite(r.grad_norm)) {
    // Every rank sees the same norm (dp-summed gradients, tp-summed
    // squares), so every rank skips together.
    r.skipped = true;
    r.clip_coef = 0;
    r.steps_taken = steps_;
    return r;
  }
  r.clip_coef = clip_coefficient(r.grad_norm, options_.grad_clip);
  ops::AdamWParams p;
  p.lr = float(lr);
  p.beta1 = float(options_.beta1);
  p.beta2 = float(options_.beta2);
  p.eps = float(options_.eps);
  p.weight_decay = float(options_.weight_decay);
  p.step = steps_ + 1;
  p.grad_scale = float(r.clip_coef);
  if (sharded()) {
    sharded_step(ctx, comms, p);
  } else {
    // On a GPU the same pass writes the bf16 compute copy the model reads.
    const Tensor compute = params_.device() == Device::cpu ? Tensor{} : params_.compute_parameters();
    ops::adamw_step(ctx, params_.parameters(), params_.gradients(), exp_avg(), exp_avg_sq(), compute, p);
  }
  steps_ += 1;
  r.steps_taken = steps_;
  return r;
}

void AdamW::sharded_step(const ops::Ctx& ctx, const StepComms& comms, const ops::AdamWParams& p) {
  const bool cpu = params_.device() == Device::cpu;
  const Tensor grads = params_.gradients(), m = exp_avg(), v = exp_avg_sq();
  // The weights all ranks need afterwards: the fp32 master on the CPU (it
  // is the compute copy), the bf16 compute copy on a GPU.
  const Tensor weights = cpu ? params_.parameters() : params_.compute_parameters();
  const Tensor master = cpu ? params_.parameters() : params_.master_shard();
  const ops::CudaDevice* gpu = cpu ? nullptr : comms.gpu;
  void* gather_stream = gpu ? gpu->comm_stream() : ctx.stream;
  const std::vector<model::ShardRange>& ranges = layout_->ranges();
  for (const Bucket& b : layout_->buckets()) {
    const Span mine = layout_->part(b, layout_->dp_rank());
    if (mine.size() > 0) {
      const std::vector<model::ShardRange> at = model::overlaps_of(ranges, mine.begin, mine.end);
      DAPO_CHECK(at.size() == 1 && at[0].begin == mine.begin && at[0].end == mine.end, "AdamW: bucket part [",
                 mine.begin, ", ", mine.end, ") is not one span of the shard");
      const int64_t s = at[0].shard_offset, len = mine.size();
      const Tensor master_part = cpu ? master.slice_rows(mine.begin, mine.end) : master.slice_rows(s, s + len);
      ops::adamw_step(ctx, master_part, grads.slice_rows(mine.begin, mine.end), m.slice_rows(s, s + len),
                      v.slice_rows(s, s + len), cpu ? Tensor{} : weights.slice_rows(mine.begin, mine.end), p);
    }
    // This bucket's gather overlaps the next bucket's update.
    if (gpu) gpu->comm_waits_for_compute();
    all_gather_bucket(*layout_, *dp_, weights, b, gather_stream);
  }
  if (gpu) gpu->compute_waits_for_comm();
}

}  // namespace dapo::optim
