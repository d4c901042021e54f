// The partition of the optimizer over the data-parallel group (ZeRO-1,
// docs/DESIGN.md section 3b): which elements of a ParamStore's flat buffers
// each dp rank updates, and the buckets of the dp gradient reduction that
// deliver exactly those elements.
//
// Buckets. The flat buffer is cut into buckets from its END (the order in
// which the backward finishes gradients: head, layers L-1 .. 0, embedding),
// each `B` elements, the one at the start ([0, N mod B)) shorter. With
// sharding, B is bucket_bytes / 4 rounded up to a multiple of dp * 64, so
// that every bucket splits into dp equal parts of a multiple of 64 floats
// (256 bytes, the alignment of ParamStore's views).
//
// Shards. Each bucket [b, e) is split over the ranks: rank r holds
// [b + r*p, b + (r+1)*p) with p = floor((e - b) / (64 dp)) * 64, and the
// last rank also the tail [b + dp*p, e) (a multiple of 64 below 64 dp;
// only the short first bucket can have one: N is a multiple of 64, not of
// 64 dp). Every span and every shard offset is thus 256-byte aligned. So one
// bucket is one reduce-scatter (in place: each rank's part of the bucket
// is where the sum lands) plus, for a tail, one all-reduce; after the step,
// one all-gather (plus a broadcast of the tail from the last rank) puts
// the updated weights back. A rank's shard is the union of its parts of
// all buckets, stored compactly in bucket (buffer) order: Adam moments (and
// on a GPU the fp32 master) exist only for it. Ranks differ by at most one
// tail (< 64 dp elements) in shard size.
//
// The partition depends only on (buffer length, dp, bucket_bytes), never
// on data: every rank computes every rank's spans. Checkpoints do not see
// it (they store full tensors), so any layout loads any checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dapo/model/param_store.h"
#include "dapo/model/qwen2_config.h"
#include "dapo/parallel/comm.h"

namespace dapo::optim {

inline constexpr size_t kDefaultBucketBytes = size_t(64) << 20;
// Parts of a bucket are multiples of this many floats (256 bytes).
inline constexpr int64_t kShardAlignElements = 64;

// [begin, end) of a flat buffer.
struct Span {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Span&) const = default;
};

// Buckets of `buffer_elements` in launch order (from the end), each
// `bucket_elements` long but the last (the buffer's start). The unsharded
// dp all-reduce uses these boundaries as they are.
std::vector<Span> bucket_spans(int64_t buffer_elements, int64_t bucket_elements);

struct Bucket {
  Span span;          // of the flat buffer
  int64_t part = 0;   // elements per rank in the reduce-scatter, from span.begin
  // [span.begin + dp*part, span.end): the last rank's extra tail (may be empty).
  Span tail(int dp) const { return {span.begin + dp * part, span.end}; }
};

class ShardLayout {
 public:
  // buffer_elements: a multiple of 64 (ParamStore's padding). dp_size >= 1.
  ShardLayout(int64_t buffer_elements, int dp_size, int dp_rank, size_t bucket_bytes = kDefaultBucketBytes);

  int dp_size() const { return dp_size_; }
  int dp_rank() const { return dp_rank_; }
  int64_t buffer_elements() const { return buffer_elements_; }
  int64_t bucket_elements() const { return bucket_elements_; }
  // In launch order (from the end of the buffer).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Rank r's part of bucket b (the last rank's includes the tail).
  Span part(const Bucket& b, int r) const;
  // Rank r's spans in buffer order, with their offsets in its compact shard.
  const std::vector<model::ShardRange>& ranges(int r) const { return ranges_[size_t(r)]; }
  const std::vector<model::ShardRange>& ranges() const { return ranges(dp_rank_); }
  int64_t shard_elements(int r) const;
  int64_t shard_elements() const { return shard_elements(dp_rank_); }
  // Every rank's spans, for gathers over `dp` (ParamStore::shard_master).
  model::ShardMap map(const parallel::Comm& dp) const;

 private:
  int dp_size_ = 1, dp_rank_ = 0;
  int64_t buffer_elements_ = 0, bucket_elements_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<model::ShardRange>> ranges_;  // per rank
};

// The collectives over dp of one bucket (every rank calls them for the same
// bucket in the same order), on `stream` for device tensors:
// grads: the flat gradients; bucket b SUMmed, in place, into each rank's
// part (a reduce-scatter, and an all-reduce of the tail). Elements of
// other ranks' parts are left undefined.
void reduce_scatter_bucket(const ShardLayout& layout, const parallel::Comm& dp, const Tensor& grads, const Bucket& b,
                           void* stream);
// weights: a flat buffer of the store's layout (f32 or bf16); every rank's
// part of bucket b goes to every rank (an in-place all-gather, and a
// broadcast of the tail from the last rank).
void all_gather_bucket(const ShardLayout& layout, const parallel::Comm& dp, const Tensor& weights, const Bucket& b,
                       void* stream);

// Per-rank bytes of the training state, from the same carving as the
// ParamStore and the ShardLayout (`dapo info --memory`): the largest rank's
// when the shards differ.
struct TrainStateBytes {
  int64_t buffer_elements = 0;  // the flat buffers' length (tp slice, padding included)
  int64_t shard_elements = 0;   // elements this rank's optimizer updates
  size_t master = 0;            // fp32 master weights (the shard on a GPU with sharding; whole otherwise)
  size_t compute = 0;           // bf16 compute copy (GPU; 0 on the CPU, where the master is the compute copy)
  size_t gradients = 0;         // fp32 gradients (whole: ZeRO-1 shards no gradients)
  size_t moments = 0;           // both fp32 Adam moments (the shard with sharding)
  size_t total() const { return master + compute + gradients + moments; }
};
// shard: optim.shard_optimizer (no effect when dp == 1).
TrainStateBytes train_state_bytes(const model::Qwen2Config& config, int64_t tp, int64_t dp, Device device, bool shard,
                                  size_t bucket_bytes = kDefaultBucketBytes);

}  // namespace dapo::optim
