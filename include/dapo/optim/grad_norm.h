// Gradient reduction over data-parallel ranks and the global gradient norm
// over tensor-parallel slices (docs/DESIGN.md section 2, phase 8).
//
// dp: SUM, not average. The policy loss (rl/policy_loss.h) already divides
// by the mini-batch's GLOBAL token (or sequence) count, so each rank's
// gradient is its share of the global loss's gradient, and the sum over
// ranks is that gradient exactly - the same update as one rank on the
// whole mini-batch.
//
// Global norm: sqrt(sum of squares of every distinct gradient element of
// the logical model). Within a tp group the ranks hold distinct slices of
// split tensors and identical copies of replicated ones (norm weights,
// replicated KV heads); ParamEntry::primary marks the one copy to count.
// Each rank sums the squares of its primary entries and the tp group
// all-reduces (SUM) those partial sums; the result is the same on every
// rank. dp ranks hold identical (already reduced) gradients, so no dp
// reduction is needed.
#pragma once

#include <vector>

#include "dapo/model/param_store.h"
#include "dapo/ops/context.h"

namespace dapo::parallel {
class Comm;
}

namespace dapo::optim {

// Collective over dp when dp->size() > 1: params.gradients() becomes the
// sum over the dp ranks (in place, one all-reduce of the flat buffer).
// dp == nullptr or a size-1 Comm: nothing to do.
void all_reduce_gradients(const parallel::Comm* dp, model::ParamStore& params);

// The global L2 norm of params' gradients, in double (sums of squares in
// double per contiguous run of primary entries). Collective over tp when
// tp->size() > 1 (tp == nullptr: this rank holds the whole model). On a
// device backend the partial sums come from ops::sum_squares into
// ctx.scratch (required then) and are copied to the host.
double global_grad_norm(const ops::Ctx& ctx, const model::ParamStore& params, const parallel::Comm* tp);

// This rank's part of the norm's square: the sum of squares of its primary
// entries' gradients (what global_grad_norm all-reduces over tp).
double local_grad_sum_squares(const ops::Ctx& ctx, const model::ParamStore& params);
// The same restricted to `within` (spans of the flat buffer in buffer
// order: a dp rank's optimizer shard, whose gradients hold the dp sum after
// a reduce-scatter). The shards of a dp group partition the buffer, so the
// sum of these over dp is local_grad_sum_squares of the summed gradients,
// up to the order of the float partial sums (one per run and span).
double local_grad_sum_squares(const ops::Ctx& ctx, const model::ParamStore& params,
                              const std::vector<model::ShardRange>& within);

// torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6));
// 1 when max_norm == 0 (clipping off). A non-finite norm gives NaN.
double clip_coefficient(double grad_norm, double max_norm);

}  // namespace dapo::optim
