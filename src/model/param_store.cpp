// ParamStore: one master and one gradient buffer per rank, carved into
// aligned views in HF order; deterministic random init and host loads.
#include "dapo/model/param_store.h"

#include <algorithm>
#include <cstring>
#include <vector>

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

#ifdef DAPO_WITH_CUDA
void cuda_check(cudaError_t err, const char* what) {
  DAPO_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}
#endif

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

ParamStore::ParamStore(const Qwen2Config& config, int64_t tp_rank, int64_t tp_size, Device device, void* stream)
    : config_(config), tp_rank_(tp_rank), tp_size_(tp_size), device_(device), stream_(stream) {
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
#ifdef DAPO_WITH_CUDA
  cuda_check(cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(stream_)), "cudaMemsetAsync of a parameter buffer");
#else
  DAPO_FAIL("a device parameter buffer in a build without CUDA");
#endif
}

void ParamStore::sync() const {
#ifdef DAPO_WITH_CUDA
  if (device_ != Device::cpu)
    cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize (parameters)");
#endif
}

void ParamStore::copy_in(float* dst, const float* src, int64_t n) const {
  if (n == 0) return;
  if (device_ == Device::cpu) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  // The master in fp32, and its bf16 compute copy rounded here on the host,
  // in bounded pieces; each piece is waited for before its staging is reused.
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  bf16* cdst = compute_ + (dst - master_);
  std::vector<bf16> stage(size_t(std::min(n, kStageElements)));
  for (int64_t i = 0; i < n; i += kStageElements) {
    const int64_t m = std::min(kStageElements, n - i);
    for (int64_t j = 0; j < m; ++j) stage[size_t(j)] = to_bf16(src[i + j]);
    cuda_check(cudaMemcpyAsync(dst + i, src + i, size_t(m) * sizeof(float), cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync to the parameter buffer");
    cuda_check(cudaMemcpyAsync(cdst + i, stage.data(), size_t(m) * sizeof(bf16), cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync to the compute copy");
    sync();
  }
#else
  DAPO_FAIL("a device parameter buffer in a build without CUDA");
#endif
}

void ParamStore::copy_out(float* dst, const float* src, int64_t n) const {
  if (n == 0) return;
  if (device_ == Device::cpu) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
#ifdef DAPO_WITH_CUDA
  cuda_check(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost,
                             static_cast<cudaStream_t>(stream_)),
             "cudaMemcpyAsync from the parameter buffer");
  sync();
#else
  DAPO_FAIL("a device parameter buffer in a build without CUDA");
#endif
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
Tensor ParamStore::compute_parameters() const {
  return compute_ ? Tensor(compute_, DType::bf16, {buffer_elements_}, device_) : parameters();
}

int64_t ParamStore::num_local_parameters() const {
  int64_t n = 0;
  for (const ParamEntry& e : entries_) n += e.param.numel();
  return n;
}

void ParamStore::zero_grad() { zero(grads_, size_t(buffer_elements_) * sizeof(float)); }

void ParamStore::write_param(const ParamEntry& e, const float* host) {
  copy_in(static_cast<float*>(e.param.data), host, e.param.numel());
}

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
  copy_out(local, static_cast<const float*>(e.param.data), n);
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
  buffer_.resize(size_t(params_.param(name).numel()));
  params_.read_local(name, buffer_.data(), int64_t(buffer_.size()));
  return buffer_.data();
}

}  // namespace dapo::model
