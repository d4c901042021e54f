// What bench_ops_gpu's measurements share: CUDA-event timing (the median
// of repetitions after warm-ups, eager or as replays of a captured CUDA
// graph), random device inputs, the command line's shape overrides, and one
// JSON line per measurement against the H200's limits. CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dapo/core/arena.h"
#include "dapo/core/bf16.h"
#include "dapo/core/error.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/ops/cuda_graph.h"

namespace dapo::bench::ops_bench {

// H200 SXM: HBM3e bandwidth and dense bf16 tensor-core throughput.
inline constexpr double kPeakBytesPerSecond = 4.8e12;
inline constexpr double kPeakFlopsPerSecond = 989e12;

#define OPS_BENCH_CUDA(call)                                                                            \
  do {                                                                                                  \
    const cudaError_t ops_bench_err_ = (call);                                                          \
    DAPO_CHECK(ops_bench_err_ == cudaSuccess, #call, ": ", cudaGetErrorString(ops_bench_err_));        \
  } while (0)

// One measurement: ms per call, and the fewest bytes the call must move
// (each input read once, each output written once) and/or its FLOPs; the
// JSON line adds GB/s and TFLOP/s and their fractions of the H200's limits,
// and any extra fields.
struct Line {
  std::string op, variant, shape, dtype;
  double ms = 0, bytes = 0, flops = 0;
  nlohmann::json extra = nlohmann::json::object();
};
inline void emit(const Line& l) {
  nlohmann::ordered_json j;
  j["op"] = l.op;
  if (!l.variant.empty()) j["variant"] = l.variant;
  j["shape"] = l.shape;
  if (!l.dtype.empty()) j["dtype"] = l.dtype;
  j["ms"] = std::round(l.ms * 1e4) / 1e4;
  if (l.bytes > 0 && l.ms > 0) {
    const double bps = l.bytes / (l.ms * 1e-3);
    j["gbps"] = std::round(bps / 1e8) / 10;
    j["bw_frac"] = std::round(bps / kPeakBytesPerSecond * 1e3) / 1e3;
  }
  if (l.flops > 0 && l.ms > 0) {
    const double fps = l.flops / (l.ms * 1e-3);
    j["tflops"] = std::round(fps / 1e11) / 10;
    j["flop_frac"] = std::round(fps / kPeakFlopsPerSecond * 1e3) / 1e3;
  }
  for (auto it = l.extra.begin(); it != l.extra.end(); ++it) j[it.key()] = it.value();
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// How each measurement repeats: `warmup` calls, then `reps` timed ones.
struct Repeat {
  int reps = 20;
  int warmup = 3;
};

// The median over reps of one call of f each, timed by events on the
// stream around each call (f enqueues its work on `stream`).
inline double median_ms(void* stream_ptr, const std::function<void()>& f, const Repeat& r) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  for (int i = 0; i < r.warmup; ++i) f();
  std::vector<cudaEvent_t> ev(size_t(r.reps) + 1);
  for (auto& e : ev) OPS_BENCH_CUDA(cudaEventCreate(&e));
  OPS_BENCH_CUDA(cudaEventRecord(ev[0], stream));
  for (int i = 0; i < r.reps; ++i) {
    f();
    OPS_BENCH_CUDA(cudaEventRecord(ev[size_t(i) + 1], stream));
  }
  OPS_BENCH_CUDA(cudaEventSynchronize(ev.back()));
  std::vector<float> ms(size_t(r.reps));
  for (int i = 0; i < r.reps; ++i) OPS_BENCH_CUDA(cudaEventElapsedTime(&ms[size_t(i)], ev[size_t(i)], ev[size_t(i) + 1]));
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return double(ms[ms.size() / 2]);
}

// The median over reps of `calls` back-to-back calls of f between two
// events, per call (eager launches: the host's launch gaps included).
inline double batch_ms(void* stream_ptr, const std::function<void()>& f, int calls, const Repeat& r) {
  return median_ms(stream_ptr, [&] {
    for (int i = 0; i < calls; ++i) f();
  }, r) / calls;
}

// Milliseconds per call of one(i), i = 0..calls-1 (each enqueues its work
// on ctx's stream), captured as one CUDA graph (as the engine replays its
// decode steps): the median over reps replays after `warmup` replays. The
// first call runs once outside the capture (plans, kernel attributes).
inline double graph_ms(const ops::Ctx& ctx, int calls, const std::function<void(int)>& one, const Repeat& r) {
  one(0);
  OPS_BENCH_CUDA(cudaStreamSynchronize(ctx.stream));
  const ops::CapturedGraph graph = ops::CapturedGraph::capture(ctx, [&] {
    for (int i = 0; i < calls; ++i) one(i);
  });
  return median_ms(ctx.stream, [&] { graph.launch(ctx); }, r) / calls;
}

// Uniform values in [lo, hi) (bf16-rounded for bf16 tensors; i32/i64 not
// supported), a random block of 2^20 repeated over the tensor.
inline void fill_random(const ops::CudaDevice& dev, Tensor t, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  const size_t n = size_t(t.numel()), block = size_t(1) << 20;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> r(std::min(block, n));
  for (auto& x : r) x = dist(gen);
  const size_t chunk = size_t(1) << 26;  // host staging of at most 64M elements at a time
  for (size_t at = 0; at < n; at += chunk) {
    const size_t len = std::min(chunk, n - at);
    const size_t es = dtype_size(t.dtype);
    const Tensor dst(static_cast<char*>(t.data) + at * es, t.dtype, {int64_t(len)}, Device::cuda);
    if (t.dtype == DType::f32) {
      std::vector<float> v(len);
      for (size_t i = 0; i < len; ++i) v[i] = r[(at + i) % r.size()];
      dev.copy_to_device(dst, Tensor(v.data(), DType::f32, {int64_t(len)}));
    } else {
      DAPO_CHECK(t.dtype == DType::bf16, "fill_random: f32 or bf16, not ", dtype_name(t.dtype));
      std::vector<bf16> v(len);
      for (size_t i = 0; i < len; ++i) v[i] = to_bf16(r[(at + i) % r.size()]);
      dev.copy_to_device(dst, Tensor(v.data(), DType::bf16, {int64_t(len)}));
    }
  }
}

// --shape K=V,K=V:V2,...: values that replace an op's default lists of
// sizes (each op names the keys it reads; --list shows them).
class Shapes {
 public:
  Shapes() = default;
  explicit Shapes(const std::string& spec) {
    std::stringstream items(spec);
    for (std::string item; std::getline(items, item, ',');) {
      const size_t eq = item.find('=');
      DAPO_CHECK(eq != std::string::npos && eq > 0, "--shape: '", item, "' is not KEY=VALUE[:VALUE...]");
      std::vector<int64_t> values;
      std::stringstream vs(item.substr(eq + 1));
      for (std::string v; std::getline(vs, v, ':');) values.push_back(int64_t(std::stod(v)));
      DAPO_CHECK(!values.empty(), "--shape: no value for ", item.substr(0, eq));
      map_[item.substr(0, eq)] = values;
    }
  }
  std::vector<int64_t> values(const std::string& key, std::vector<int64_t> defaults) const {
    used_.insert(key);
    const auto it = map_.find(key);
    return it == map_.end() ? defaults : it->second;
  }
  int64_t value(const std::string& key, int64_t def) const { return values(key, {def}).front(); }
  bool has(const std::string& key) const {
    used_.insert(key);
    return map_.count(key) > 0;
  }
  // Keys given but never read by the op (a typo, or a key of another op).
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : map_)
      if (!used_.count(k)) out.push_back(k);
    return out;
  }

 private:
  std::map<std::string, std::vector<int64_t>> map_;
  mutable std::set<std::string> used_;
};

inline std::string kv(std::initializer_list<std::pair<const char*, int64_t>> parts) {
  std::string s;
  for (const auto& [k, v] : parts) s += (s.empty() ? "" : ",") + std::string(k) + "=" + std::to_string(v);
  return s;
}

}  // namespace dapo::bench::ops_bench
