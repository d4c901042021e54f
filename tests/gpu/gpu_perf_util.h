// Perf cases of the GPU tests (run only with DAPO_GPU_PERF=1): a device
// arena big enough for the real model shapes, inputs filled from a tiled
// random block (fast to make, never zeros), cudaEvent timing on the
// device's stream after a warm-up, and one JSON line per case.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/ops/cuda_graph.h"

namespace dapo::test {

inline bool gpu_perf_enabled() {
  const char* e = std::getenv("DAPO_GPU_PERF");
  return e != nullptr && std::string(e) == "1";
}

// Uniform values in [lo, hi) (bf16-rounded for bf16 tensors), a random
// block of 2^20 repeated over the tensor.
inline void fill_random(const ops::CudaDevice& dev, Tensor t, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  const size_t n = size_t(t.numel()), block = size_t(1) << 20;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> r(block);
  for (auto& x : r) x = dist(gen);
  Tensor h = t;
  h.device = Device::cpu;
  if (t.dtype == DType::f32) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = r[i % block];
    h.data = v.data();
    dev.copy_to_device(t, h);
  } else {
    std::vector<bf16> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = to_bf16(r[i % block]);
    h.data = v.data();
    dev.copy_to_device(t, h);
  }
}

// Milliseconds per call of f, over `iters` calls after `warmup` calls
// (f must enqueue its work on `stream`).
inline double time_ms(void* stream, const std::function<void()>& f, int iters = 50, int warmup = 5) {
  const auto s = static_cast<cudaStream_t>(stream);
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t begin, end;
  EXPECT_EQ(cudaEventCreate(&begin), cudaSuccess);
  EXPECT_EQ(cudaEventCreate(&end), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(begin, s), cudaSuccess);
  for (int i = 0; i < iters; ++i) f();
  EXPECT_EQ(cudaEventRecord(end, s), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(end), cudaSuccess);
  float ms = 0.0f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, begin, end), cudaSuccess);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return double(ms) / iters;
}

// The median of `iters` calls of f timed one by one (device events around
// each), after 3 warm-ups: robust to a slow outlier where time_ms averages.
template <class F>
double median_ms(cudaStream_t stream, F&& f, int iters = 20) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<cudaEvent_t> ev(size_t(iters) + 1);
  for (auto& e : ev) EXPECT_EQ(cudaEventCreate(&e), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(ev[0], stream), cudaSuccess);
  for (int i = 0; i < iters; ++i) {
    f();
    EXPECT_EQ(cudaEventRecord(ev[size_t(i) + 1], stream), cudaSuccess);
  }
  EXPECT_EQ(cudaEventSynchronize(ev.back()), cudaSuccess);
  std::vector<float> ms(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i)
    EXPECT_EQ(cudaEventElapsedTime(&ms[size_t(i)], ev[size_t(i)], ev[size_t(i) + 1]), cudaSuccess);
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Microseconds per call of one(i), i = 0..calls-1 (each enqueues its work
// on ctx's stream), captured as one CUDA graph: the best of `reps` replays
// after one warm-up replay.
inline double graph_us_per_call(const ops::Ctx& ctx, int calls, const std::function<void(int)>& one, int reps = 3) {
  const ops::CapturedGraph graph = ops::CapturedGraph::capture(ctx, [&] {
    for (int i = 0; i < calls; ++i) one(i);
  });
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  graph.launch(ctx);
  cudaEvent_t e0, e1;
  EXPECT_EQ(cudaSuccess, cudaEventCreate(&e0));
  EXPECT_EQ(cudaSuccess, cudaEventCreate(&e1));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    EXPECT_EQ(cudaSuccess, cudaEventRecord(e0, stream));
    graph.launch(ctx);
    EXPECT_EQ(cudaSuccess, cudaEventRecord(e1, stream));
    EXPECT_EQ(cudaSuccess, cudaEventSynchronize(e1));
    float ms = 0;
    EXPECT_EQ(cudaSuccess, cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, 1e3 * double(ms) / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

// One JSON line without a dtype field (the op's name or shape says it).
inline void print_perf(const char* op, const std::string& shape, double ms, double bytes) {
  std::printf("{\"op\": \"%s\", \"shape\": \"%s\", \"ms\": %.4f, \"gbps\": %.1f}\n", op, shape.c_str(), ms,
              bytes / (ms * 1e-3) / 1e9);
}

// One JSON line: bytes are the fewest the op must move (each input read
// once, each output written once).
inline void print_perf(const std::string& op, const std::string& shape, const char* dtype, double ms, double bytes) {
  std::printf("{\"op\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\",\"ms\":%.4f,\"gbps\":%.1f}\n", op.c_str(),
              shape.c_str(), dtype, ms, bytes / (ms * 1e6));
  std::fflush(stdout);
}

}  // namespace dapo::test
