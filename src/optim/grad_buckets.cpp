// Bucketed dp gradient all-reduce overlapped with the backward (grad_buckets.h).
#include "dapo/optim/grad_buckets.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::optim {

GradBuckets::GradBuckets(model::ParamStore& params, const parallel::Comm& dp, const ops::CudaDevice& gpu,
                         size_t bucket_bytes)
    : params_(params), dp_(dp), gpu_(gpu),
      bucket_elements_(std::max<int64_t>(1, int64_t(bucket_bytes / sizeof(float)))) {
  DAPO_CHECK(params.device() == Device::cuda, "GradBuckets: the gradients are not on a GPU");
}

void GradBuckets::begin() {
  reduced_from_ = params_.buffer_elements();
  launched_ = 0;
}

void GradBuckets::launch(int64_t begin, int64_t end) {
  if (end <= begin) return;
  // The bucket's gradients were written by kernels already enqueued on the
  // compute stream: the communication stream starts after them.
  gpu_.comm_waits_for_compute();
  const Tensor all = params_.gradients();
  dp_.all_reduce(all.slice_rows(begin, end), parallel::ReduceOp::sum, gpu_.comm_stream());
  ++launched_;
}

void GradBuckets::ready(int64_t offset) {
  DAPO_CHECK(offset >= 0 && offset <= reduced_from_, "GradBuckets: final from ", offset, " after ", reduced_from_);
  if (dp_.size() == 1) return;
  // Launch whole buckets only, from the end: the boundaries are the same on
  // every rank and in every step.
  while (reduced_from_ - offset >= bucket_elements_) {
    launch(reduced_from_ - bucket_elements_, reduced_from_);
    reduced_from_ -= bucket_elements_;
  }
}

void GradBuckets::finish() {
  if (dp_.size() > 1) {
    while (reduced_from_ > 0) {
      const int64_t b = std::max<int64_t>(0, reduced_from_ - bucket_elements_);
      launch(b, reduced_from_);
      reduced_from_ = b;
    }
  }
  gpu_.compute_waits_for_comm();
}

}  // namespace dapo::optim
