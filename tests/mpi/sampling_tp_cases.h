// Cases shared by the tp sampling tests (test_sampling_tp.cpp on host
// tensors through MPI, test_nccl_sampling.cpp on device tensors through
// NCCL): random logits the same on every rank, the sampled rows (several
// sharing a logits row), and the parameter sets.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/rng.h"
#include "dapo/ops/sampling.h"

namespace dapo::test {

struct TpSamplingCase {
  std::string name;
  ops::SamplingParams p;
  bool coarse;  // logits on a grid of 0.25: long runs of equal weights (ties at the cuts)
};

inline std::vector<TpSamplingCase> tp_sampling_cases() {
  auto P = [](float t, int k, float top_p) {
    ops::SamplingParams p;
    p.seed = 4242;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    return p;
  };
  return {{"greedy", P(0.0f, 0, 1.0f), false},    {"greedy_ties", P(0.0f, 0, 1.0f), true},
          {"T0.8", P(0.8f, 0, 1.0f), false},      {"top_k20", P(1.0f, 20, 1.0f), false},
          {"top_k1", P(0.7f, 1, 1.0f), false},    {"top_k20_ties", P(1.0f, 20, 1.0f), true},
          {"top_p0.9", P(1.0f, 0, 0.9f), false},  {"top_p0.5_ties", P(1.3f, 0, 0.5f), true},
          {"top_k50_top_p0.9", P(0.9f, 50, 0.9f), false},
          {"top_k300_top_p0.95_ties", P(1.0f, 300, 0.95f), true}};
}

// B logits rows of V, the same on every rank; rows are scaled so that some
// are flat and some peaked.
inline std::vector<float> tp_sampling_logits(int64_t B, int64_t V, bool coarse, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(B * V));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t v = 0; v < V; ++v) {
      float z = nd(gen) * float(1 + b % 4);
      if (coarse) z = std::round(z * 4.0f) / 4.0f;
      x[size_t(b * V + v)] = z;
    }
  return x;
}

// R sampled rows over B logits rows: each logits row sampled 1-3 times.
inline void tp_sampling_rows(int64_t B, std::vector<int32_t>& rows, std::vector<int64_t>& streams,
                             std::vector<int64_t>& counters) {
  rows.clear();
  streams.clear();
  counters.clear();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n <= b % 3; ++n) {
      rows.push_back(int32_t((b * 7) % B));
      streams.push_back(int64_t(stream_id({uint64_t(b), uint64_t(n), 99})));
      counters.push_back(int64_t(b * 31 + n));
    }
}

// Columns [q * V / tp, (q + 1) * V / tp) of every row.
inline std::vector<float> tp_shard(const std::vector<float>& x, int64_t B, int64_t V, int tp, int q) {
  const int64_t Vs = V / tp;
  std::vector<float> out(size_t(B * Vs));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t v = 0; v < Vs; ++v) out[size_t(b * Vs + v)] = x[size_t(b * V + q * Vs + v)];
  return out;
}

}  // namespace dapo::test
