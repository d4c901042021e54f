// ParamStore: one master and one gradient buffer per rank, carved into
// aligned views in HF order; deterministic random init and host loads.
#include "dapo/model/param_store.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/core/device_runtime.h"
#include "dapo/core/rng.h"
#include "dapo/parallel/comm.h"


namespace dapo::model {
namespace {

constexpr int64_t kAlignFloats = int64_t(Arena::kAlign / sizeof(float));

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// FNV-1a: a stable, platform-independent hash of the HF name (std::hash is
// neither), so the same seed gives the same model everywhere.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

enum class Kind { matrix, bias, norm };
Kind kind_of(const ParamSpec& spec) {
  if (spec.shape.size() == 2) return Kind::matrix;
  return spec.name.size() >= 5 && spec.name.compare(spec.name.size() - 5, 5, ".bias") == 0 ? Kind::bias
                                                                                            : Kind::norm;
}

// Host staging of device copies: bounded, so that loading a tensor of
// several GB does not need a second copy of it in host memory.
constexpr int64_t kStageElements = int64_t(1) << 22;

// Walks the local elements of `slice` in row-major order, calling
// f(local_index, full_index).
template <class F>
void for_each_slice_element(const SliceSpec& slice, const std::vector<int64_t>& full_shape, F f) {
  DAPO_CHECK(full_shape.size() == 1 || full_shape.size() == 2, "slices of 1-D and 2-D tensors only");
  const int64_t rows = full_shape[0];
  const int64_t cols = full_shape.size() == 2 ? full_shape[1] : 1;
  int64_t r0 = 0, nr = rows, c0 = 0, nc = cols;
  if (slice.dim == 0) r0 = slice.begin, nr = slice.count;
  if (slice.dim == 1) c0 = slice.begin, nc = slice.count;
  DAPO_CHECK(r0 + nr <= rows && c0 + nc <= cols, "slice outside the tensor");
  int64_t local = 0;
  for (int64_t r = r0; r < r0 + nr; ++r)
    for (int64_t c = c0; c < c0 + nc; ++c) f(local++, r * cols + c);
}

}  // namespace

Tensor shaped_view(float* data, const std::vector<int64_t>& shape, Device device) {
  DAPO_CHECK(shape.size() <= size_t(Tensor::kMaxDims), "shape of ", shape.size(), " dimensions");
  Tensor t;
  t.data = data;
  t.dtype = DType::f32;
  t.device = device;
  t.ndim = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  return t;
}

void extract_slice(const SliceSpec& slice, const std::vector<int64_t>& full_shape, const float* full,
                   float* local) {
  for_each_slice_element(slice, full_shape, [&](int64_t l, int64_t f) { local[l] = full[f]; });
}

void insert_slice(const SliceSpec& slice, const std::vector<int64_t>& full_shape, const float* local,
                  float* full) {
  for_each_slice_element(slice, full_shape, [&](int64_t l, int64_t f) { full[f] = local[l]; });
}

float random_init_value(const ParamSpec& spec, int64_t index, const RandomInit& init) {
  const U32x4 r = philox_draw(init.seed, stream_id({name_hash(spec.name)}), uint64_t(index));
  const float u = 2.0f * uniform_float(r.v[0]) - 1.0f;  // [-1, 1)
  switch (kind_of(spec)) {
    case Kind::matrix: return init.weight_scale * u;
    case Kind::bias: return init.bias_scale * u;
    case Kind::norm: return 1.0f + init.norm_scale * u;
  }
  return 0.0f;
}

namespace {

// The entries of tp rank `tp_rank` with their offsets in the flat buffers
// (views not yet set); *total gets the buffers' length.
std::vector<ParamEntry> carve(const Qwen2Config& config, int64_t tp_rank, int64_t tp_size, int64_t* total) {
  DAPO_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tp rank ", tp_rank, " of ", tp_size);
  std::vector<ParamSpec> specs = qwen2_param_specs(config);
  std::vector<ParamEntry> entries;
  entries.reserve(specs.size());
  int64_t offset = 0;
  for (ParamSpec& spec : specs) {
    ParamEntry e;
    e.slice = local_slice(spec, config, tp_rank, tp_size);
    if (is_replicated(spec.partition)) e.primary = tp_rank == 0;
    if (spec.partition == Partition::column_kv) e.primary = tp_rank % kv_replicas(config, tp_size) == 0;
    e.spec = std::move(spec);
    e.offset = offset;
    offset += (numel_of(e.slice.local_shape) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    entries.push_back(std::move(e));
  }
  *total = offset;
  return entries;
}

}  // namespace

int64_t ParamStore::buffer_elements_of(const Qwen2Config& config, int64_t tp_rank, int64_t tp_size) {
  int64_t total = 0;
  carve(config, tp_rank, tp_size, &total);
  return total;
}

ParamStore::ParamStore(const Qwen2Config& config, int64_t tp_rank, int64_t tp_size, Device device, void* stream)
    : config_(config), tp_rank_(tp_rank), tp_size_(tp_size), device_(device), stream_(stream) {
  entries_ = carve(config, tp_rank, tp_size, &buffer_elements_);
  for (size_t i = 0; i < entries_.size(); ++i)
    DAPO_CHECK(index_.emplace(entries_[i].spec.name, i).second, "duplicate parameter ", entries_[i].spec.name);
  const size_t bytes = size_t(buffer_elements_) * sizeof(float);
  master_ = static_cast<float*>(memory_alloc(device, bytes));
  grads_ = static_cast<float*>(memory_alloc(device, bytes));
  if (device != Device::cpu) compute_ = static_cast<bf16*>(memory_alloc(device, bytes / 2));
  zero(master_, bytes);
  zero(grads_, bytes);
  if (compute_) zero(compute_, bytes / 2);
  for (ParamEntry& e : entries_) {
    e.param = shaped_view(master_ + e.offset, e.slice.local_shape, device);
    e.grad = shaped_view(grads_ + e.offset, e.slice.local_shape, device);
    e.compute = e.param;
    if (compute_) {
      e.compute.dtype = DType::bf16;
      e.compute.data = compute_ + e.offset;
    }
  }
  sync();
}

ParamStore::~ParamStore() {
  memory_free(device_, master_);
  memory_free(device_, grads_);
  memory_free(device_, compute_);
}

void ParamStore::zero(void* p, size_t bytes) const {
  if (bytes == 0) return;
  if (device_ == Device::cpu) {
    std::memset(p, 0, bytes);
    return;
  }
  device_runtime::memset_async(p, 0, bytes, stream_, "a parameter buffer");
}

void ParamStore::sync() const {
  if (device_ != Device::cpu) device_runtime::synchronize(stream_, "parameters");
}

void ParamStore::copy_in(int64_t offset, const float* src, int64_t n) const {
  if (n == 0) return;
  if (device_ == Device::cpu) {
    std::memcpy(master_ + offset, src, size_t(n) * sizeof(float));
    return;
  }
  // The master in fp32 (where this rank holds it), and its bf16 compute
  // copy rounded here on the host, in bounded pieces; each piece is waited
  // for before its staging is reused.
  bf16* cdst = compute_ + offset;
  std::vector<bf16> stage(size_t(std::min(n, kStageElements)));
  for (int64_t i = 0; i < n; i += kStageElements) {
    const int64_t m = std::min(kStageElements, n - i);
    for (int64_t j = 0; j < m; ++j) stage[size_t(j)] = to_bf16(src[i + j]);
    if (master_sharded())
      write_master_shard(offset + i, src + i, m);
    else
      device_runtime::copy_async(master_ + offset + i, src + i, size_t(m) * sizeof(float),
                                 device_runtime::CopyKind::host_to_device, stream_, "the parameter buffer");
    device_runtime::copy_async(cdst + i, stage.data(), size_t(m) * sizeof(bf16), device_runtime::CopyKind::host_to_device,
                               stream_, "the compute copy");
    sync();
  }
}

void ParamStore::write_master_shard(int64_t offset, const float* src, int64_t n) const {
  for (const ShardRange& r : overlaps_of(shards_.mine(), offset, offset + n))
    device_runtime::copy_async(master_ + r.shard_offset, src + (r.begin - offset), size_t(r.end - r.begin) * sizeof(float),
                               device_runtime::CopyKind::host_to_device, stream_, "the master shard");
}

void ParamStore::copy_out(float* dst, const float* src, int64_t n) const {
  if (n == 0) return;
  if (device_ == Device::cpu) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  device_runtime::copy_async(dst, src, size_t(n) * sizeof(float), device_runtime::CopyKind::device_to_host, stream_,
                             "the parameter buffer");
  sync();
}

const ParamEntry& ParamStore::entry(const std::string& name) const {
  const auto it = index_.find(name);
  DAPO_CHECK(it != index_.end(), "the model has no parameter '", name, "'");
  return entries_[it->second];
}

const ParamEntry& ParamStore::lm_head() const {
  return entry(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

Tensor ParamStore::parameters() const {
  DAPO_CHECK(!master_sharded(), "ParamStore::parameters(): the fp32 master is sharded over dp (master_shard())");
  return Tensor(master_, DType::f32, {buffer_elements_}, device_);
}

Tensor ParamStore::master_shard() const {
  DAPO_CHECK(master_sharded(), "ParamStore::master_shard(): the master is not sharded");
  return Tensor(master_, DType::f32, {shard_elements_}, device_);
}

void ParamStore::shard_master(ShardMap map) {
  DAPO_CHECK(device_ != Device::cpu, "shard_master: on the CPU the fp32 master is the compute copy and stays whole");
  DAPO_CHECK(!master_sharded(), "shard_master: the master is sharded already");
  DAPO_CHECK(map.dp != nullptr && !map.ranks.empty(), "shard_master: an empty map");
  int64_t covered = 0;
  for (size_t r = 0; r < map.ranks.size(); ++r) covered += map.elements(int(r));
  DAPO_CHECK(covered == buffer_elements_, "shard_master: the map covers ", covered, " of ", buffer_elements_,
             " elements");
  const int64_t n = map.elements(map.rank());
  float* shard = static_cast<float*>(memory_alloc(device_, size_t(n) * sizeof(float)));
  for (const ShardRange& r : map.mine())
    device_runtime::copy_async(shard + r.shard_offset, master_ + r.begin, size_t(r.end - r.begin) * sizeof(float),
                               device_runtime::CopyKind::device_to_device, stream_, "the master shard");
  sync();
  memory_free(device_, master_);
  master_ = shard;
  shard_elements_ = n;
  shards_ = std::move(map);
  // The fp32 views would point at memory that is gone: shapes only.
  for (ParamEntry& e : entries_) e.param.data = nullptr;
}
Tensor ParamStore::gradients() const { return Tensor(grads_, DType::f32, {buffer_elements_}, device_); }
Tensor ParamStore::compute_parameters() const {
  return compute_ ? Tensor(compute_, DType::bf16, {buffer_elements_}, device_) : parameters();
}

int64_t ParamStore::num_local_parameters() const {
  int64_t n = 0;
  for (const ParamEntry& e : entries_) n += e.param.numel();
  return n;
}

void ParamStore::zero_grad() { zero(grads_, size_t(buffer_elements_) * sizeof(float)); }

void ParamStore::write_param(const ParamEntry& e, const float* host) { copy_in(e.offset, host, e.param.numel()); }

void ParamStore::init_random(const RandomInit& init) {
  std::vector<float> local;
  for (const ParamEntry& e : entries_) {
    local.resize(size_t(e.param.numel()));
    // Every element is its own Philox draw, so the elements are independent:
    // spread them over threads (a 1.5B model is 1.5e9 draws).
    const SliceSpec& s = e.slice;
    const int64_t rows = e.spec.shape[0], cols = e.spec.shape.size() == 2 ? e.spec.shape[1] : 1;
    const int64_t r0 = s.dim == 0 ? s.begin : 0, c0 = s.dim == 1 ? s.begin : 0;
    const int64_t nc = s.dim == 1 ? s.count : cols;
    const int64_t n = int64_t(local.size());
    DAPO_CHECK(n == (s.dim == 0 ? s.count : rows) * nc, e.spec.name, ": slice of ", n, " elements");
#pragma omp parallel for schedule(static)
    for (int64_t l = 0; l < n; ++l)
      local[size_t(l)] = random_init_value(e.spec, (r0 + l / nc) * cols + c0 + l % nc, init);
    write_param(e, local.data());
  }
}

void ParamStore::load_full(const std::string& name, const float* full, int64_t n) {
  const ParamEntry& e = entry(name);
  DAPO_CHECK(n == numel_of(e.spec.shape), name, ": ", n, " elements given, the full tensor has ",
             numel_of(e.spec.shape));
  std::vector<float> local(size_t(e.param.numel()));
  extract_slice(e.slice, e.spec.shape, full, local.data());
  write_param(e, local.data());
}

void ParamStore::load_local(const std::string& name, const float* local, int64_t n) {
  const ParamEntry& e = entry(name);
  DAPO_CHECK(n == e.param.numel(), name, ": ", n, " elements given, this rank's slice has ", e.param.numel());
  write_param(e, local);
}

void ParamStore::read_local(const std::string& name, float* local, int64_t n) const {
  const ParamEntry& e = entry(name);
  DAPO_CHECK(n == e.param.numel(), name, ": room for ", n, " elements, this rank's slice has ", e.param.numel());
  if (master_sharded()) return gather_local(name, local, n, -1);
  copy_out(local, master_ + e.offset, n);
}

void ParamStore::gather_local(const std::string& name, float* local, int64_t n, int root) const {
  const ParamEntry& e = entry(name);
  if (!master_sharded()) {
    if (local) read_local(name, local, n);
    return;
  }
  const bool receives = root < 0 || root == shards_.rank();
  DAPO_CHECK(!receives || local != nullptr, name, ": nowhere to gather the master to");
  DAPO_CHECK(!receives || n == e.param.numel(), name, ": room for ", n, " elements, this rank's slice has ",
             e.param.numel());
  gather_shards(shards_, e.offset, e.param.numel(), {master_}, {receives ? local : nullptr}, root, device_, stream_);
}

float* ParamHostAccess::write_target(ParamStore& params, const std::string& name) {
  DAPO_CHECK(&params == &params_, "ParamHostAccess used with another store");
  if (params.device() == Device::cpu) return params.param(name).ptr<float>();
  finish(params);
  buffer_.assign(size_t(params.param(name).numel()), 0.0f);
  pending_ = name;
  return buffer_.data();
}

void ParamHostAccess::finish(ParamStore& params) {
  if (pending_.empty()) return;
  params.load_local(pending_, buffer_.data(), int64_t(buffer_.size()));
  pending_.clear();
}

const float* ParamHostAccess::read_source(const std::string& name) {
  DAPO_CHECK(pending_.empty(), "ParamHostAccess: read before finish()");
  if (params_.device() == Device::cpu) return params_.param(name).ptr<float>();
  if (!prefetched_.empty()) {
    DAPO_CHECK(prefetched_ == name, "ParamHostAccess: ", name, " read after a prefetch of ", prefetched_);
    prefetched_.clear();
    return buffer_.data();
  }
  buffer_.resize(size_t(params_.param(name).numel()));
  params_.read_local(name, buffer_.data(), int64_t(buffer_.size()));
  return buffer_.data();
}

void ParamHostAccess::prefetch(const std::string& name, int root) {
  DAPO_CHECK(pending_.empty(), "ParamHostAccess: prefetch before finish()");
  if (!params_.master_sharded()) return;
  const bool receives = root < 0 || root == params_.master_shards().rank();
  const int64_t n = params_.param(name).numel();
  buffer_.resize(receives ? size_t(n) : 0);
  params_.gather_local(name, receives ? buffer_.data() : nullptr, n, root);
  if (receives) prefetched_ = name;
}

int ShardMap::rank() const {
  DAPO_CHECK(dp != nullptr && int(ranks.size()) == dp->size(), "ShardMap of ", ranks.size(), " ranks for a group of ",
             dp ? dp->size() : 0);
  return dp->rank();
}

int64_t ShardMap::elements(int r) const {
  int64_t n = 0;
  for (const ShardRange& s : ranks[size_t(r)]) n += s.end - s.begin;
  return n;
}

std::vector<ShardRange> overlaps_of(const std::vector<ShardRange>& ranges, int64_t lo, int64_t hi) {
  std::vector<ShardRange> out;
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const ShardRange& r, int64_t x) { return r.end <= x; });
  for (; it != ranges.end() && it->begin < hi; ++it) {
    const int64_t b = std::max(lo, it->begin), e = std::min(hi, it->end);
    if (b < e) out.push_back({b, e, it->shard_offset + (b - it->begin)});
  }
  return out;
}

void gather_shards(const ShardMap& map, int64_t lo, int64_t n, const std::vector<const float*>& mine,
                   const std::vector<float*>& outs, int root, Device device, void* stream) {
  DAPO_CHECK(mine.size() == outs.size(), "gather_shards: ", mine.size(), " buffers, ", outs.size(), " outputs");
  const int me = map.rank(), P = int(map.ranks.size());
  // This rank's parts, buffer by buffer, span by span: the order the
  // receivers walk the senders' spans in.
  const std::vector<ShardRange> own = overlaps_of(map.mine(), lo, lo + n);
  int64_t own_n = 0;
  for (const ShardRange& r : own) own_n += r.end - r.begin;
  std::vector<std::byte> packed(size_t(own_n) * mine.size() * sizeof(float));
  size_t at = 0;
  for (const float* base : mine)
    for (const ShardRange& r : own) {
      const size_t len = size_t(r.end - r.begin) * sizeof(float);
      if (device == Device::cpu) {
        std::memcpy(packed.data() + at, base + r.shard_offset, len);
      } else {
        device_runtime::copy_async(packed.data() + at, base + r.shard_offset, len,
                                   device_runtime::CopyKind::device_to_host, stream, "a shard");
      }
      at += len;
    }
  if (device != Device::cpu) device_runtime::synchronize(stream, "shard gather");
  std::vector<std::vector<std::byte>> to_each(static_cast<size_t>(P));
  if (root >= 0)
    to_each[size_t(root)] = std::move(packed);
  else
    for (int r = 0; r < P; ++r) to_each[size_t(r)] = packed;
  const std::vector<std::byte> got = map.dp->all_to_all_v(to_each);
  if (root >= 0 && me != root) return;
  size_t from = 0;
  for (int r = 0; r < P; ++r) {
    const std::vector<ShardRange> theirs = overlaps_of(map.ranks[size_t(r)], lo, lo + n);
    for (float* out : outs)
      for (const ShardRange& s : theirs) {
        const size_t len = size_t(s.end - s.begin) * sizeof(float);
        DAPO_CHECK(from + len <= got.size(), "gather_shards: rank ", r, " sent too little");
        std::memcpy(out + (s.begin - lo), got.data() + from, len);
        from += len;
      }
  }
  DAPO_CHECK(from == got.size(), "gather_shards: ", got.size() - from, " bytes left over");
}

}  // namespace dapo::model
