// Buckets and per-rank shards of the flat buffers (shard_layout.h).
#include "dapo/optim/shard_layout.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::optim {

std::vector<Span> bucket_spans(int64_t buffer_elements, int64_t bucket_elements) {
  DAPO_CHECK(buffer_elements >= 0 && bucket_elements >= 1, "buckets of ", bucket_elements, " over ",
             buffer_elements, " elements");
  std::vector<Span> out;
  for (int64_t end = buffer_elements; end > 0; end -= bucket_elements)
    out.push_back({std::max<int64_t>(0, end - bucket_elements), end});
  return out;
}

ShardLayout::ShardLayout(int64_t buffer_elements, int dp_size, int dp_rank, size_t bucket_bytes)
    : dp_size_(dp_size), dp_rank_(dp_rank), buffer_elements_(buffer_elements) {
  DAPO_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "ShardLayout: dp rank ", dp_rank, " of ", dp_size);
  DAPO_CHECK(buffer_elements >= 0 && buffer_elements % kShardAlignElements == 0, "ShardLayout: a buffer of ",
             buffer_elements, " elements (not a multiple of ", kShardAlignElements, ")");
  const int64_t unit = kShardAlignElements * dp_size;
  const int64_t want = std::max<int64_t>(1, int64_t(bucket_bytes / sizeof(float)));
  bucket_elements_ = (want + unit - 1) / unit * unit;
  for (const Span& s : bucket_spans(buffer_elements, bucket_elements_))
    buckets_.push_back({s, s.size() / unit * kShardAlignElements});
  ranges_.resize(size_t(dp_size));
  for (int r = 0; r < dp_size; ++r) {
    int64_t at = 0;
    // Buffer order: the buckets back to front.
    for (auto b = buckets_.rbegin(); b != buckets_.rend(); ++b) {
      const Span p = part(*b, r);
      if (p.size() == 0) continue;
      ranges_[size_t(r)].push_back({p.begin, p.end, at});
      at += p.size();
    }
  }
}

Span ShardLayout::part(const Bucket& b, int r) const {
  DAPO_CHECK(r >= 0 && r < dp_size_, "ShardLayout: rank ", r, " of ", dp_size_);
  const int64_t begin = b.span.begin + int64_t(r) * b.part;
  return {begin, r == dp_size_ - 1 ? b.span.end : begin + b.part};
}

int64_t ShardLayout::shard_elements(int r) const {
  int64_t n = 0;
  for (const model::ShardRange& s : ranges(r)) n += s.end - s.begin;
  return n;
}

model::ShardMap ShardLayout::map(const parallel::Comm& dp) const {
  model::ShardMap m;
  m.dp = &dp;
  m.ranks = ranges_;
  return m;
}

void reduce_scatter_bucket(const ShardLayout& layout, const parallel::Comm& dp, const Tensor& grads, const Bucket& b,
                           void* stream) {
  const int P = layout.dp_size(), r = layout.dp_rank();
  DAPO_CHECK(dp.size() == P && dp.rank() == r, "reduce_scatter_bucket: a dp group of ", dp.size(),
             " ranks for a layout of ", P);
  if (b.part > 0) {
    const int64_t mine = b.span.begin + int64_t(r) * b.part;
    dp.reduce_scatter(grads.slice_rows(mine, mine + b.part), grads.slice_rows(b.span.begin, b.span.begin + P * b.part),
                      parallel::ReduceOp::sum, stream);
  }
  const Span tail = b.tail(P);
  if (tail.size() > 0) dp.all_reduce(grads.slice_rows(tail.begin, tail.end), parallel::ReduceOp::sum, stream);
}

void all_gather_bucket(const ShardLayout& layout, const parallel::Comm& dp, const Tensor& weights, const Bucket& b,
                       void* stream) {
  const int P = layout.dp_size(), r = layout.dp_rank();
  DAPO_CHECK(dp.size() == P && dp.rank() == r, "all_gather_bucket: a dp group of ", dp.size(),
             " ranks for a layout of ", P);
  if (b.part > 0) {
    const int64_t mine = b.span.begin + int64_t(r) * b.part;
    dp.all_gather(weights.slice_rows(b.span.begin, b.span.begin + P * b.part), weights.slice_rows(mine, mine + b.part),
                  stream);
  }
  const Span tail = b.tail(P);
  if (tail.size() > 0) dp.broadcast(weights.slice_rows(tail.begin, tail.end), P - 1, stream);
}

TrainStateBytes train_state_bytes(const model::Qwen2Config& config, int64_t tp, int64_t dp, Device device, bool shard,
                                  size_t bucket_bytes) {
  DAPO_CHECK(tp >= 1 && dp >= 1, "train_state_bytes: tp ", tp, " dp ", dp);
  TrainStateBytes b;
  b.buffer_elements = model::ParamStore::buffer_elements_of(config, 0, tp);
  b.shard_elements = b.buffer_elements;
  if (shard && dp > 1) {
    const ShardLayout layout(b.buffer_elements, int(dp), 0, bucket_bytes);
    b.shard_elements = 0;
    for (int r = 0; r < int(dp); ++r) b.shard_elements = std::max(b.shard_elements, layout.shard_elements(r));
  }
  const size_t f32 = sizeof(float);
  const bool gpu = device != Device::cpu;
  b.master = size_t(gpu ? b.shard_elements : b.buffer_elements) * f32;
  b.compute = gpu ? size_t(b.buffer_elements) * sizeof(bf16) : 0;
  b.gradients = size_t(b.buffer_elements) * f32;
  b.moments = 2 * size_t(b.shard_elements) * f32;
  return b;
}

}  // namespace dapo::optim
