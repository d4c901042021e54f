// ParamStore: one master and one gradient buffer per rank, carved into
// aligned views in HF order; deterministic random init and host loads.
#include "dapo/model/param_store.h"

#include <cstring>

#include "dapo/core/arena.h"
#include "dapo/core/rng.h"

#ifdef DAPO_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

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

// Host <-> buffer copies; device buffers go through the CUDA runtime.
void copy_in(Device device, float* dst, const float* src, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  const cudaError_t err = cudaMemcpy(dst, src, size_t(n) * sizeof(float), cudaMemcpyHostToDevice);
  DAPO_CHECK(err == cudaSuccess, "cudaMemcpy to the parameter buffer: ", cudaGetErrorString(err));
#else
  DAPO_FAIL("a device parameter buffer in a build without CUDA");
#endif
}

void copy_out(Device device, float* dst, const float* src, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  const cudaError_t err = cudaMemcpy(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost);
  DAPO_CHECK(err == cudaSuccess, "cudaMemcpy from the parameter buffer: ", cudaGetErrorString(err));
#else
  DAPO_FAIL("a device parameter buffer in a build without CUDA");
#endif
}

void fill_zero(Device device, float* p, int64_t n) {
  if (n == 0) return;
  if (device == Device::cpu) {
    std::memset(p, 0, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  const cudaError_t err = cudaMemset(p, 0, size_t(n) * sizeof(float));
  DAPO_CHECK(err == cudaSuccess, "cudaMemset of the gradient buffer: ", cudaGetErrorString(err));
#else
  DAPO_FAIL("a device parameter buffer in a build without CUDA");
#endif
}

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

ParamStore::ParamStore(const Qwen2Config& config, int64_t tp_rank, int64_t tp_size, Device device)
    : config_(config), tp_rank_(tp_rank), tp_size_(tp_size), device_(device) {
  DAPO_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tp rank ", tp_rank, " of ", tp_size);
  std::vector<ParamSpec> specs = qwen2_param_specs(config);
  entries_.reserve(specs.size());
  int64_t offset = 0;
  for (ParamSpec& spec : specs) {
    ParamEntry e;
    e.slice = local_slice(spec, config, tp_rank, tp_size);
    if (spec.partition == Partition::replicated) e.primary = tp_rank == 0;
    if (spec.partition == Partition::column_kv) e.primary = tp_rank % kv_replicas(config, tp_size) == 0;
    e.spec = std::move(spec);
    e.offset = offset;
    offset += (numel_of(e.slice.local_shape) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    DAPO_CHECK(index_.emplace(e.spec.name, entries_.size()).second, "duplicate parameter ", e.spec.name);
    entries_.push_back(std::move(e));
  }
  buffer_elements_ = offset;
  const size_t bytes = size_t(buffer_elements_) * sizeof(float);
  master_ = static_cast<float*>(memory_alloc(device, bytes));
  grads_ = static_cast<float*>(memory_alloc(device, bytes));
  fill_zero(device, master_, buffer_elements_);
  fill_zero(device, grads_, buffer_elements_);
  for (ParamEntry& e : entries_) {
    e.param = shaped_view(master_ + e.offset, e.slice.local_shape, device);
    e.grad = shaped_view(grads_ + e.offset, e.slice.local_shape, device);
  }
}

ParamStore::~ParamStore() {
  memory_free(device_, master_);
  memory_free(device_, grads_);
}

const ParamEntry& ParamStore::entry(const std::string& name) const {
  const auto it = index_.find(name);
  DAPO_CHECK(it != index_.end(), "the model has no parameter '", name, "'");
  return entries_[it->second];
}

const ParamEntry& ParamStore::lm_head() const {
  return entry(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

Tensor ParamStore::parameters() const { return Tensor(master_, DType::f32, {buffer_elements_}, device_); }
Tensor ParamStore::gradients() const { return Tensor(grads_, DType::f32, {buffer_elements_}, device_); }

int64_t ParamStore::num_local_parameters() const {
  int64_t n = 0;
  for (const ParamEntry& e : entries_) n += e.param.numel();
  return n;
}

void ParamStore::zero_grad() { fill_zero(device_, grads_, buffer_elements_); }

void ParamStore::write_param(const ParamEntry& e, const float* host) {
  copy_in(device_, static_cast<float*>(e.param.data), host, e.param.numel());
}

void ParamStore::init_random(const RandomInit& init) {
  std::vector<float> local;
  for (const ParamEntry& e : entries_) {
    local.resize(size_t(e.param.numel()));
    for_each_slice_element(e.slice, e.spec.shape,
                           [&](int64_t l, int64_t f) { local[size_t(l)] = random_init_value(e.spec, f, init); });
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
  copy_out(device_, local, static_cast<const float*>(e.param.data), n);
}

}  // namespace dapo::model
