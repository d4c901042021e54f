// Bucketed dp gradient reduction overlapped with the backward (grad_buckets.h).
#include "dapo/optim/grad_buckets.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::optim {

GradBuckets::GradBuckets(model::ParamStore& params, const parallel::Comm& dp, const ops::CudaDevice& gpu,
                         size_t bucket_bytes)
    : params_(params), dp_(dp), gpu_(gpu) {
  DAPO_CHECK(params.device() == Device::cuda, "GradBuckets: the gradients are not on a GPU");
  spans_ = bucket_spans(params.buffer_elements(), std::max<int64_t>(1, int64_t(bucket_bytes / sizeof(float))));
}

GradBuckets::GradBuckets(model::ParamStore& params, const parallel::Comm& dp, const ops::CudaDevice& gpu,
                         const ShardLayout& layout)
    : params_(params), dp_(dp), gpu_(gpu), layout_(&layout) {
  DAPO_CHECK(params.device() == Device::cuda, "GradBuckets: the gradients are not on a GPU");
  DAPO_CHECK(layout.buffer_elements() == params.buffer_elements() && layout.dp_size() == dp.size() &&
                 layout.dp_rank() == dp.rank(),
             "GradBuckets: a shard layout of ", layout.buffer_elements(), " elements over ", layout.dp_size(),
             " ranks for ", params.buffer_elements(), " elements over ", dp.size());
  for (const Bucket& b : layout.buckets()) spans_.push_back(b.span);
}

void GradBuckets::begin() {
  next_ = 0;
  frontier_ = params_.buffer_elements();
  launched_ = 0;
  launched_early_ = 0;
}

void GradBuckets::launch(size_t bucket) {
  // The bucket's gradients were written by kernels already enqueued on the
  // compute stream: the communication stream starts after them.
  gpu_.comm_waits_for_compute();
  const Tensor all = params_.gradients();
  if (layout_)
    reduce_scatter_bucket(*layout_, dp_, all, layout_->buckets()[bucket], gpu_.comm_stream());
  else
    dp_.all_reduce(all.slice_rows(spans_[bucket].begin, spans_[bucket].end), parallel::ReduceOp::sum,
                   gpu_.comm_stream());
  ++launched_;
}

void GradBuckets::ready(int64_t offset) {
  DAPO_CHECK(offset >= 0 && offset <= frontier_, "GradBuckets: final from ", offset, " after ", frontier_);
  frontier_ = offset;
  if (dp_.size() == 1) return;
  // Whole buckets only, from the end: the boundaries are the same on every
  // rank and in every step.
  while (next_ < spans_.size() && spans_[next_].begin >= offset) {
    launch(next_++);
    ++launched_early_;
  }
}

void GradBuckets::finish() {
  if (dp_.size() > 1)
    while (next_ < spans_.size()) launch(next_++);
  gpu_.compute_waits_for_comm();
}

}  // namespace dapo::optim
