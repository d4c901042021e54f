// dp gradient sum and the tp-aware global gradient norm (grad_norm.h).
#include "dapo/optim/grad_norm.h"

#include <cmath>
#include <limits>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/core/error.h"
#include "dapo/ops/sum_squares.h"
#include "dapo/parallel/comm.h"
#include "device_memory.h"

namespace dapo::optim {
namespace {

struct Run {
  int64_t begin = 0, end = 0;  // elements of the flat gradient buffer
};

// Maximal runs of consecutive primary entries, each as one span of the flat
// buffer (the padding between views is zero, so it adds nothing): one
// sum_squares per run instead of one per tensor.
std::vector<Run> primary_runs(const model::ParamStore& params) {
  std::vector<Run> runs;
  bool open = false;
  for (const model::ParamEntry& e : params.entries()) {
    if (!e.primary) {
      open = false;
      continue;
    }
    const int64_t end = e.offset + e.grad.numel();
    if (open)
      runs.back().end = end;
    else
      runs.push_back({e.offset, end});
    open = true;
  }
  return runs;
}

}  // namespace

void all_reduce_gradients(const parallel::Comm* dp, model::ParamStore& params) {
  if (dp == nullptr || dp->size() == 1) return;
  dp->all_reduce(params.gradients(), parallel::ReduceOp::sum, params.stream());
}

namespace {

// Sum of squares of the gradients over `runs`, in double over float partials.
double sum_squares_of_runs(const ops::Ctx& ctx, const model::ParamStore& params, const std::vector<Run>& runs) {
  const Tensor grads = params.gradients();
  const Device device = grads.device;
  DAPO_CHECK(device == ops::backend_device(ctx.backend), "gradients on ", device_name(device), ", ops on ",
             device_name(ops::backend_device(ctx.backend)));
  if (runs.empty()) return 0.0;
  // The partial sums land in one (R) f32 array on the ops device, read back
  // with one copy.
  std::vector<float> partial(runs.size());
  float* out = partial.data();
  size_t mark = 0;
  if (device != Device::cpu) {
    DAPO_CHECK(ctx.scratch != nullptr, "the grad norm on a device needs ctx.scratch");
    mark = ctx.scratch->mark();
    out = ctx.scratch->alloc_array<float>(runs.size());
  }
  float* base = static_cast<float*>(grads.data);
  for (size_t i = 0; i < runs.size(); ++i)
    ops::sum_squares(ctx, Tensor(out + i, DType::f32, {1}, device),
                     Tensor(base + runs[i].begin, DType::f32, {runs[i].end - runs[i].begin}, device));
  if (device != Device::cpu) {
    detail::copy_to_host(ctx.stream, device, partial.data(), out, int64_t(runs.size()));
    ctx.scratch->reset(mark);
  }
  double local = 0;
  for (float p : partial) local += double(p);
  return local;
}

}  // namespace

double local_grad_sum_squares(const ops::Ctx& ctx, const model::ParamStore& params) {
  return sum_squares_of_runs(ctx, params, primary_runs(params));
}

double local_grad_sum_squares(const ops::Ctx& ctx, const model::ParamStore& params,
                              const std::vector<model::ShardRange>& within) {
  std::vector<Run> runs;
  for (const Run& r : primary_runs(params))
    for (const model::ShardRange& s : model::overlaps_of(within, r.begin, r.end)) runs.push_back({s.begin, s.end});
  return sum_squares_of_runs(ctx, params, runs);
}

double global_grad_norm(const ops::Ctx& ctx, const model::ParamStore& params, const parallel::Comm* tp) {
  DAPO_CHECK(tp == nullptr || tp->size() == params.tp_size(), "tp Comm of ", tp ? tp->size() : 0,
             " ranks for a ParamStore split ", params.tp_size(), " ways");
  DAPO_CHECK(tp != nullptr || params.tp_size() == 1, "a tp-split ParamStore needs its tp Comm for the norm");
  const double local = local_grad_sum_squares(ctx, params);
  const double total = tp != nullptr && tp->size() > 1 ? tp->all_reduce_f64(local, parallel::ReduceOp::sum) : local;
  return std::sqrt(total);
}

double clip_coefficient(double grad_norm, double max_norm) {
  DAPO_CHECK(max_norm >= 0, "max_norm ", max_norm);
  if (!std::isfinite(grad_norm)) return std::numeric_limits<double>::quiet_NaN();
  if (max_norm == 0) return 1.0;
  return std::min(1.0, max_norm / (grad_norm + 1e-6));
}

}  // namespace dapo::optim
