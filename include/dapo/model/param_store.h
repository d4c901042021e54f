// ParamStore: the Qwen2 parameters that THIS tensor-parallel rank holds
// (its slice of every tensor, per local_slice()), in ONE contiguous fp32
// master buffer, with ONE contiguous fp32 gradient buffer of the same
// layout. Named views in HF order let the model, the optimizer and the
// checkpoint code address single tensors, while the data-parallel gradient
// all-reduce, the grad-norm and AdamW each touch a single flat buffer.
//
// Layout: the views follow qwen2_param_specs() order; each starts at a
// multiple of 256 bytes (64 floats) inside the buffer, so views are aligned
// for vector loads, cuBLASLt and TMA. The gaps between views are padding:
// zero in both buffers, never written by the model, so reductions and norms
// over the whole flat buffer see only real elements.
//
// Tied embeddings: a tied model has no "lm_head.weight" entry (as in HF's
// safetensors); the model uses embed_tokens' view as its LM head, so both
// uses accumulate into embed_tokens' gradient.
//
// Mixed precision on the CUDA backend: a third buffer of the same layout
// holds the bf16 COMPUTE copy of the weights, which the model reads; the
// fp32 master stays the optimizer's (AdamW's kernel writes both), and
// gradients stay fp32 so that micro-batches accumulate without bf16
// rounding. On the CPU backend the compute views are the master views.
//
// ZeRO-1 on the CUDA backend (optim/shard_layout.h): shard_master() keeps
// the fp32 master only for the spans of the flat buffer this dp rank's
// optimizer updates, in one compact buffer; the bf16 compute copy and the
// gradients stay whole. Then `param` views have no data (shapes only),
// parameters() is refused, host loads write the compute copy whole and the
// master where this rank holds it, and host reads of the master gather it
// over the dp group (collective). On the CPU the master IS the compute
// copy, so it is never sharded.
//
// Ownership: the store owns its buffers (memory_alloc on `device`) and
// frees them on destruction; views are non-owning and live as long as the
// store. Host-side writes (init_random, load_*, zero_grad) work on either
// device: device memory is written on `stream` (the rank's compute stream,
// so that they are ordered with the kernels) through bounded host staging,
// and the bf16 copy is written with the master.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "dapo/core/tensor.h"
#include "dapo/model/param_spec.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::parallel {
class Comm;
}

namespace dapo::model {

// A span [begin, end) of the flat buffers that one dp rank holds, stored
// from `shard_offset` on in that rank's compact shard buffers.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t shard_offset = 0;
  bool operator==(const ShardRange&) const = default;
};

// Which spans every rank of a dp group holds (optim::ShardLayout makes
// it): ranks[r] in buffer order; together they cover the flat buffer once.
struct ShardMap {
  const parallel::Comm* dp = nullptr;  // the group, for gathers; must outlive the users of the map
  std::vector<std::vector<ShardRange>> ranks;
  int rank() const;
  const std::vector<ShardRange>& mine() const { return ranks[size_t(rank())]; }
  int64_t elements(int r) const;  // rank r's shard size
};

// The parts of `ranges` that overlap [lo, hi): {flat begin, flat end,
// shard offset of flat begin} each, in buffer order.
std::vector<ShardRange> overlaps_of(const std::vector<ShardRange>& ranges, int64_t lo, int64_t hi);

// Collective over map.dp: the values of flat elements [lo, lo + n) from the
// ranks that hold them. mine[k] is this rank's compact buffer k (on
// `device`, copied on `stream`), outs[k] an n-element host buffer that
// receives the gathered values on `root` (every rank when root < 0; others
// pass nullptr). Moves host bytes over MPI: checkpoints, not the hot path.
void gather_shards(const ShardMap& map, int64_t lo, int64_t n, const std::vector<const float*>& mine,
                   const std::vector<float*>& outs, int root, Device device, void* stream);

// One parameter tensor of this rank.
struct ParamEntry {
  ParamSpec spec;    // HF name, full logical shape, partition rule
  SliceSpec slice;   // which part of the full tensor this rank holds
  Tensor param;      // this rank's slice, shape slice.local_shape, f32 (view into the master buffer)
  Tensor grad;       // same shape, f32 (view into the gradient buffer)
  Tensor compute;    // same shape: bf16 view into the compute buffer (CUDA), or `param` itself (CPU)
  int64_t offset = 0;  // first element of both views inside the flat buffers
  // Whether this rank's copy counts in sums over all ranks (the global
  // gradient norm): false on all but the first of the tp ranks that hold
  // the same values (replicated norms: all but tp rank 0; replicated KV
  // heads: all but the first rank of each KV replica group).
  bool primary = true;
};

// Deterministic random values for tests and demos. Every element of the
// FULL logical tensor gets a value from Philox keyed by (seed, FNV-1a hash
// of the HF name, element index in the full row-major tensor), and a rank
// keeps the elements of its slice: tp = 1 and tp = 2 hold the same logical
// model. Values are uniform:
//   matrices (linears, embedding): uniform(-weight_scale, weight_scale)
//   biases:                        uniform(-bias_scale, bias_scale)
//   norm weights:                  1 + uniform(-norm_scale, norm_scale)
struct RandomInit {
  uint64_t seed = 1;
  float weight_scale = 0.05f;
  float bias_scale = 0.05f;
  float norm_scale = 0.1f;
};

// The random value of full-tensor element `index` of tensor `spec` (what
// init_random stores there); tests use it to build reference models.
float random_init_value(const ParamSpec& spec, int64_t index, const RandomInit& init);

class ParamStore {
 public:
  // The slices of tp rank `tp_rank` of `tp_size` (check_tp_compatible is
  // the caller's: a config that cannot be split is a user error there).
  // All buffers start zero. `stream` (cudaStream_t) orders the store's
  // own device copies and memsets with the rank's kernels; nullptr on the CPU.
  ParamStore(const Qwen2Config& config, int64_t tp_rank, int64_t tp_size, Device device = Device::cpu,
             void* stream = nullptr);
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  const Qwen2Config& config() const { return config_; }
  int64_t tp_rank() const { return tp_rank_; }
  int64_t tp_size() const { return tp_size_; }
  Device device() const { return device_; }
  void* stream() const { return stream_; }
  // The dtype the model computes with: f32 on the CPU, bf16 on CUDA.
  DType compute_dtype() const { return device_ == Device::cpu ? DType::f32 : DType::bf16; }

  // Every tensor of this rank in HF order (the checkpoint walks these).
  const std::vector<ParamEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // A name the model does not have is a bug (DAPO_CHECK).
  const ParamEntry& entry(const std::string& name) const;
  Tensor param(const std::string& name) const { return entry(name).param; }
  Tensor grad(const std::string& name) const { return entry(name).grad; }
  // The LM head's weight (V_local, C) and its gradient: lm_head.weight, or
  // embed_tokens' views when the embeddings are tied.
  const ParamEntry& lm_head() const;

  // The whole buffers as flat f32 tensors (padding included): one
  // all-reduce over gradients() sums the gradients of every tensor at once.
  Tensor parameters() const;
  Tensor gradients() const;
  // The compute copy as one flat tensor (bf16 on CUDA; the master on the CPU).
  Tensor compute_parameters() const;
  int64_t buffer_elements() const { return buffer_elements_; }
  int64_t num_local_parameters() const;  // elements of the views, padding excluded
  // The flat buffers' length for tp rank `tp_rank` of `tp_size` (the same
  // carving as the constructor, without allocating): memory reports.
  static int64_t buffer_elements_of(const Qwen2Config& config, int64_t tp_rank, int64_t tp_size);

  // ZeRO-1 (CUDA only): keeps the fp32 master of map.mine() alone, in a
  // compact buffer (its values from the full master), and frees the rest.
  // Once per store. `map` must cover this store's buffer.
  void shard_master(ShardMap map);
  bool master_sharded() const { return !shards_.ranks.empty(); }
  const ShardMap& master_shards() const { return shards_; }
  // The compact fp32 master of a sharded store (f32, map.mine()'s total).
  Tensor master_shard() const;

  void zero_grad();
  void init_random(const RandomInit& init);
  // Copies a FULL tensor (its spec's shape, row-major, `n` elements) and
  // keeps this rank's slice of it.
  void load_full(const std::string& name, const float* full, int64_t n);
  // Copies this rank's slice itself (slice.local_shape, row-major, `n`
  // elements), as import-hf and the checkpoint reader produce it.
  void load_local(const std::string& name, const float* local, int64_t n);
  // The reverse of load_local: this rank's slice into host memory. With a
  // sharded master: collective over the dp group (gather_local, every rank).
  void read_local(const std::string& name, float* local, int64_t n) const;
  // Collective over the dp group of a sharded master: this rank's slice of
  // `name` into `local` on dp rank `root` (every rank when root < 0; local
  // may be nullptr elsewhere). Without sharding: read_local where local is
  // given.
  void gather_local(const std::string& name, float* local, int64_t n, int root) const;

 private:
  void write_param(const ParamEntry& e, const float* host);
  void copy_in(int64_t offset, const float* src, int64_t n) const;  // master (and compute copy) <- host
  void zero(void* p, size_t bytes) const;                        // on stream_
  void sync() const;                                             // waits for stream_
  void copy_out(float* dst, const float* src, int64_t n) const;
  void write_master_shard(int64_t offset, const float* src, int64_t n) const;  // sharded: the held parts

  Qwen2Config config_;
  int64_t tp_rank_ = 0;
  int64_t tp_size_ = 1;
  Device device_ = Device::cpu;
  void* stream_ = nullptr;  // cudaStream_t
  std::vector<ParamEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  int64_t buffer_elements_ = 0;
  float* master_ = nullptr;  // (buffer_elements_) f32
  float* grads_ = nullptr;   // (buffer_elements_) f32
  bf16* compute_ = nullptr;  // (buffer_elements_) bf16, CUDA only
  ShardMap shards_;          // sharded master: master_ holds shards_.mine() compactly
  int64_t shard_elements_ = 0;
};

// Pointer access to this rank's slices for readers and writers that take
// one (checkpoint and HF readers/writers, tensor by tensor): on the CPU the
// master's own memory, on a GPU one host buffer reused tensor by tensor,
// so that a model on the device never needs a second full copy on the host.
class ParamHostAccess {
 public:
  explicit ParamHostAccess(const ParamStore& params) : params_(params) {}
  ParamHostAccess(const ParamHostAccess&) = delete;
  ParamHostAccess& operator=(const ParamHostAccess&) = delete;
  // Where to write tensor `name` (its local slice). On a GPU the tensor
  // written before (if any) goes to the device first: call finish() after
  // the last one.
  float* write_target(ParamStore& params, const std::string& name);
  void finish(ParamStore& params);
  // This rank's slice of `name`, valid until the next call. With a sharded
  // master it gathers over the dp group (collective), unless prefetch(name)
  // did already.
  const float* read_source(const std::string& name);
  // Sharded master: the collective gather of `name` to dp rank `root`,
  // which read_source(name) on that rank then returns (checkpoint writers
  // call it on every rank, the source only on the writer). Otherwise
  // nothing.
  void prefetch(const std::string& name, int root);

 private:
  const ParamStore& params_;
  std::vector<float> buffer_;
  std::string pending_;     // tensor written into buffer_, not yet on the device
  std::string prefetched_;  // tensor gathered into buffer_ by prefetch()
};

// A host view of the full shape of `shape` (1-D or 2-D) over `data`.
Tensor shaped_view(float* data, const std::vector<int64_t>& shape, Device device = Device::cpu);

// The part `slice` describes of a full row-major tensor of `full_shape`
// (1-D or 2-D; dim -1: all of it): extract copies it out of `full` into a
// dense local buffer, insert copies a local buffer into its place in `full`.
void extract_slice(const SliceSpec& slice, const std::vector<int64_t>& full_shape, const float* full,
                   float* local);
void insert_slice(const SliceSpec& slice, const std::vector<int64_t>& full_shape, const float* local,
                  float* full);

}  // namespace dapo::model
