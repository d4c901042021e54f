// The data-parallel gradient sum in buckets that start during the backward
// (the overlap PyTorch DDP and Megatron's distributed optimizer get from
// their bucketed reducers). The backward finishes the flat gradient buffer
// from its END toward its start (head, then layers L-1 .. 0, then the
// embedding: ParamStore's HF order reversed); each time the model reports
// "elements [offset, end) are final", every complete bucket behind that
// frontier is reduced over dp on the GPU's communication stream, which
// waits for the compute stream by an event; the compute stream goes on
// with the next layer. finish() reduces what is left and makes the compute
// stream wait for the communication stream, so the optimizer step sees the
// summed gradients.
//
// Two forms: all-reduce (SUM) of every bucket (an unsharded optimizer), or,
// for an optimizer sharded over dp (ZeRO-1), the ShardLayout's buckets,
// each reduce-scattered in place into the ranks' parts
// (reduce_scatter_bucket): a rank then holds the sum of its shard only,
// which is all its optimizer reads.
//
// Only the LAST micro-batch of a step feeds the buckets: earlier ones still
// accumulate into the same buffer. Bucket boundaries depend only on the
// store's layout and bucket_bytes (and dp, sharded), and NCCL's
// collectives are deterministic for a fixed size, so a step gives the same
// bits every time.
#pragma once

#include <cstdint>
#include <vector>

#include "dapo/model/param_store.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/optim/shard_layout.h"
#include "dapo/parallel/comm.h"

namespace dapo::optim {

class GradBuckets {
 public:
  // All-reduce form. dp: the data-parallel group (size 1: nothing to do).
  // bucket_bytes: the least size of a bucket (the last one may be smaller).
  GradBuckets(model::ParamStore& params, const parallel::Comm& dp, const ops::CudaDevice& gpu,
              size_t bucket_bytes = kDefaultBucketBytes);
  // Reduce-scatter form: the buckets of `layout` (the sharded optimizer's,
  // which must outlive this).
  GradBuckets(model::ParamStore& params, const parallel::Comm& dp, const ops::CudaDevice& gpu,
              const ShardLayout& layout);

  // Before the last micro-batch's backward.
  void begin();
  // The backward's report: gradient elements [offset, end) of the flat
  // buffer are final (collective over dp: every rank reports the same
  // sequence of offsets, since they run the same model).
  void ready(int64_t offset);
  // After the backward: the rest, then the compute stream waits.
  void finish();
  int64_t buckets_launched() const { return launched_; }
  // Of those, launched from ready(), i.e. while the backward still ran.
  int64_t buckets_launched_early() const { return launched_early_; }
  bool scatters() const { return layout_ != nullptr; }

 private:
  void launch(size_t bucket);

  model::ParamStore& params_;
  const parallel::Comm& dp_;
  const ops::CudaDevice& gpu_;
  const ShardLayout* layout_ = nullptr;  // reduce-scatter form
  std::vector<Span> spans_;              // launch order (from the buffer's end)
  size_t next_ = 0;                      // buckets [0, next_) are reduced or in flight
  int64_t frontier_ = 0;                 // the last offset reported
  int64_t launched_ = 0;
  int64_t launched_early_ = 0;
};

}  // namespace dapo::optim
