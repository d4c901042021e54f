// The shapes the GPU tests share: the harness's cases (test_backend_ops_*.cpp)
// compare the CUDA ops with the CPU at them, and the per-op files check
// what is not a CPU comparison (bits on a rerun, fused against unfused) at
// the same ones. Qwen2.5-0.5B: hidden 896, 14 / 2 heads of 64, MLP 4864;
// 1.5B: 1536, 12 / 2 of 128, 8960; 7B: 3584, 28 / 4 of 128, 18944; vocab 151936.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dapo/core/rng.h"
#include "dapo/core/tensor.h"
#include "dapo/ops/sampling.h"

namespace dapo::test::shapes {

// ---- rmsnorm, residual_rmsnorm ----

struct NC {
  int64_t N, C;
};
// 999: rows of no whole 16-byte packs (the element path); 1000 and up:
// packs; 8192: four packs per thread; 0 and 1 row; 4099 rows: more than the
// backward's 1024 row chunks.
inline const std::vector<NC>& norm_shapes() {
  static const std::vector<NC> v = {{37, 1000}, {5, 999}, {33, 896}, {64, 1536}, {0, 1536}, {1, 1536}, {3, 8192},
                                    {4099, 1536}};
  return v;
}

// ---- rope ----

struct THD {
  int64_t T, H, D;
};
// D = 64 and 128 (16-byte packs), an odd half (D = 6: the element path),
// no tokens, one token, a prefill of 4096.
inline const std::vector<THD>& rope_shapes() {
  static const std::vector<THD> v = {{37, 3, 128}, {29, 14, 64}, {70, 2, 6}, {1, 12, 128}, {0, 2, 64}, {4096, 2, 128}};
  return v;
}
// The positions of a rope case: up to 32767 (where the fp32 angle recipe
// matters), the two ends in the first two tokens.
inline std::vector<int32_t> rope_positions(int64_t T, int64_t D) {
  std::mt19937 gen(unsigned(T * 131 + D));
  std::uniform_int_distribution<int32_t> pos_dist(0, 32767);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (auto& p : pos) p = pos_dist(gen);
  if (T > 1) pos[0] = 0, pos[1] = 32767;
  return pos;
}

// ---- rope_kv_write ----

struct Heads {
  int64_t Hq, Hkv, D;
};
inline constexpr Heads kQwen05{14, 2, 64}, kQwen15{12, 2, 128}, kQwen7{28, 4, 128};
struct RopeKvRun {
  int64_t T;
  Heads heads;
  uint32_t seed;
  int64_t q_shift;  // q that many elements off 16-byte alignment
};
// Decode batches of 0..1000 tokens at the three head shapes, a 4096-token
// prefill (16-byte packs), an odd half (one pair per thread), q 2- and
// 4-byte aligned.
inline std::vector<RopeKvRun> rope_kv_write_runs() {
  std::vector<RopeKvRun> v;
  uint32_t seed = 100;
  for (const Heads h : {kQwen05, kQwen15, kQwen7})
    for (const int64_t T : {0, 1, 5, 128, 256, 1000}) v.push_back({T, h, seed += 10, 0});
  v.push_back({4096, kQwen15, seed += 10, 0});
  v.push_back({33, Heads{3, 1, 6}, seed += 10, 0});
  v.push_back({57, kQwen05, seed += 10, 1});
  v.push_back({4096, kQwen15, seed += 10, 2});
  return v;
}
// With Qwen3's head norm (rope.h's HeadNorm): 16 / 8 heads of 128 (Qwen3
// 0.6B / 1.7B) and of 64, 2 / 1 heads of 128 and 64, at 1, 7 and 300 tokens,
// heads of 16 and 256 (the one-warp-per-head kernel's smallest and largest),
// no tokens; and the fallback (rmsnorm_forward, then the plain kernel): q
// off 16-byte alignment, an odd half (D = 6), heads of 320 (> 256).
inline std::vector<RopeKvRun> rope_kv_write_head_norm_runs() {
  std::vector<RopeKvRun> v;
  uint32_t seed = 700;
  for (const Heads h : {Heads{16, 8, 128}, Heads{16, 8, 64}, Heads{2, 1, 128}, Heads{2, 1, 64}})
    for (const int64_t T : {1, 7, 300}) v.push_back({T, h, seed += 10, 0});
  v.push_back({9, Heads{4, 2, 16}, seed += 10, 0});
  v.push_back({5, Heads{4, 2, 256}, seed += 10, 0});
  v.push_back({0, Heads{16, 8, 128}, seed += 10, 0});
  v.push_back({57, Heads{16, 8, 128}, seed += 10, 1});
  v.push_back({33, Heads{3, 1, 6}, seed += 10, 0});
  v.push_back({20, Heads{4, 2, 320}, seed += 10, 0});
  return v;
}
// Whether rope_kv_write takes one of these runs with its one-warp-per-head
// kernel (cuda::detail::rope_kv_write_head_norm_fused), not the fallback.
inline bool head_norm_fused(const RopeKvRun& r) {
  return r.q_shift == 0 && r.heads.D % 16 == 0 && r.heads.D <= 256;
}

// ---- embedding ----

inline std::vector<int32_t> random_ids(int64_t n, int32_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = dist(gen);
  return ids;
}
struct EmbeddingRun {
  const char* tag;
  std::vector<int32_t> ids;
  int64_t V, C, vocab_start;
  uint32_t seed;
};
// A shard [500, 1500) of a 2000-token vocabulary (ids on both sides), the
// hidden sizes, rows of no whole 16-byte units (999), C below one unit (6),
// one row, none, a large batch; 4096 rows over 7 distinct ids, two in other
// shards (runs of hundreds of rows across the backward's chunks); one id
// for every row.
inline std::vector<EmbeddingRun> embedding_runs() {
  std::vector<EmbeddingRun> v = {{"", random_ids(37, 2000, 1), 1000, 1536, 500, 10},
                                 {"", random_ids(33, 300, 2), 300, 896, 0, 20},
                                 {"", random_ids(300, 500, 3), 257, 999, 100, 30},
                                 {"", random_ids(50, 64, 4), 64, 6, 0, 40},
                                 {"", random_ids(1, 10, 5), 10, 1536, 0, 50},
                                 {"", {}, 10, 1536, 0, 60},
                                 {"", random_ids(16384, 4000, 6), 4000, 1536, 0, 70}};
  const int32_t distinct[] = {100, 105, 999, 50, 5000, 223, 142};
  std::mt19937 gen(7);
  std::discrete_distribution<int> pick({40, 5, 20, 10, 10, 1, 14});  // skewed, one id rare
  std::vector<int32_t> ids(4096);
  for (auto& id : ids) id = distinct[pick(gen)];
  v.push_back({"repeats", ids, 900, 1536, 100, 80});
  v.push_back({"repeats", ids, 900, 999, 100, 90});
  v.push_back({"one_id", std::vector<int32_t>(4096, 777), 900, 896, 100, 100});
  return v;
}

// ---- attention ----

struct AttnShape {
  std::vector<int> lens;
  int64_t Hq, Hkv, D;
  uint32_t seed;
};
// MHA; GQA groups 2, 6 (Qwen2.5-1.5B), 7 (0.5B, 7B), and 0.5B / 1.5B at
// tp = 2; packed batches with empty and one-token sequences and lengths off
// the tile sizes; 40 short sequences (the device work table); one long
// sequence; 4500 sequences (more than the work table stages in shared
// memory: read from global memory); the small models' head dims 32 and 16
// (the demo model, the tiny_untied fixture).
inline std::vector<AttnShape> attention_shapes() {
  std::vector<AttnShape> v = {
      {{1, 17, 0, 130, 64, 200}, 4, 4, 64, 11},
      {{129, 1, 66}, 3, 3, 128, 12},
      {{100, 1, 257}, 4, 2, 128, 21},
      {{300, 0, 45, 128}, 12, 2, 128, 22},
      {{129, 200, 1, 1, 0}, 14, 2, 64, 23},
      {{77, 190}, 28, 4, 128, 24},
      {{513, 31}, 7, 1, 64, 25},
      {{0, 255, 0}, 6, 1, 128, 26},
      {{5,  90, 0, 33,  64, 65, 1, 2,  77, 12, 40, 0,  3,  88, 63, 17, 9,  50, 71, 6,
        26, 64, 0, 128, 31, 7,  45, 80, 2, 19, 55, 66, 11, 4, 99, 36, 48, 21, 0, 70},
       4, 2, 64, 27},
      {{4096}, 12, 2, 128, 31},
      {{2500, 1596}, 14, 2, 64, 32},
  };
  std::vector<int> lens(4500);
  for (size_t i = 0; i < lens.size(); ++i) lens[i] = int(i % 7 == 3 ? 70 : 1 + i % 3);
  v.push_back({lens, 4, 2, 64, 51});
  for (const int64_t D : {32, 16}) {
    v.push_back({{1, 17, 0, 130, 64, 200}, 4, 2, D, 41});
    v.push_back({{129, 1, 66, 0, 255, 31}, 4, 2, D, 42});
    v.push_back({{600}, 4, 2, D, 43});
    v.push_back({{33, 190, 5}, 4, 4, D, 44});
  }
  return v;
}

// ---- paged attention ----

struct PagedCase {
  int64_t Hq, Hkv, D, BS;
  std::vector<int> lens;  // context length of each sequence, new tokens included
  std::vector<int> nq;    // new tokens of each sequence
  bool share_prefix;      // sequences 0 and 1 read the same first blocks
  uint32_t seed;
};
// Decode: lengths around a block, long contexts (split-KV with the merge),
// GQA groups 2, 6, 7, 12, D 16..128; the Qwen2.5 shapes with ragged batches
// from 1 to 20000 positions, a block size of 24, the tail of a round (a few
// long sequences, planned as clusters), 5 to 16 items of one cluster each.
// Chunked prefill: several new tokens per sequence, a whole prefill, a
// sequence with no new token, a 7B chunk after a long prefix.
inline std::vector<PagedCase> paged_cases() {
  std::vector<PagedCase> v = {
      {12, 2, 128, 16, {1000, 5000, 1, 15, 16, 17}, {1, 1, 1, 1, 1, 1}, true, 1},
      {14, 2, 64, 32, {2100, 700, 1, 33, 64}, {1, 1, 1, 1, 1}, true, 2},
      {4, 2, 32, 16, {5, 100, 128, 17}, {1, 1, 1, 1}, false, 3},
      {2, 1, 16, 16, {300, 40, 1}, {1, 1, 1}, true, 4},
      {12, 1, 128, 32, {777, 3}, {1, 1}, false, 5},
      {14, 2, 64, 16, {20000, 4095, 17, 1}, {1, 1, 1, 1}, true, 31},
      {12, 2, 128, 16, {4095, 20000, 1, 17}, {1, 1, 1, 1}, true, 32},
      {28, 4, 128, 16, {20000, 20000, 4095, 17, 1}, {1, 1, 1, 1, 1}, true, 33},
  };
  {
    std::mt19937 gen(34);
    std::vector<int> lens(24), ones(24, 1);
    for (int& len : lens) len = 1 + int(gen() % 6000);
    v.push_back({14, 2, 64, 16, lens, ones, true, 35});
  }
  const std::vector<PagedCase> more = {
      {28, 4, 128, 24, {3001, 3001, 50, 777}, {1, 1, 1, 1}, true, 36},
      {12, 2, 128, 16, {8192}, {1}, false, 37},
      {14, 2, 64, 16, {20000, 4097}, {1, 1}, true, 38},
      {28, 4, 128, 16, {5000}, {1}, false, 39},
      {12, 2, 128, 16, {4096, 6000, 300, 4113}, {1, 1, 1, 1}, true, 40},
      {14, 2, 64, 16, {8192, 4100, 4096, 9, 5000, 7000, 4097, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, false, 41},
      {12, 2, 128, 16, {40, 100, 17, 600, 9}, {40, 7, 1, 300, 0}, true, 6},
      {14, 2, 64, 32, {1500, 70, 3}, {33, 70, 2}, false, 7},
      {4, 2, 32, 16, {50, 50}, {50, 13}, true, 8},
      {28, 4, 128, 16, {3000, 45, 700}, {20, 45, 1}, true, 9},
  };
  v.insert(v.end(), more.begin(), more.end());
  return v;
}
// The cases every forced split runs: ragged batches where some CTAs of a
// cluster, or whole merge groups, lie past a sequence's end; a GQA group of
// 12 (two row tiles, two cluster merges per CTA); block size 24; and (the
// last two, qsplit 3) prefill rows through clusters.
inline std::vector<PagedCase> paged_split_cases() {
  return {{14, 2, 64, 16, {2000, 700, 1, 33, 300}, {1, 1, 1, 1, 1}, true, 40},
          {12, 2, 128, 16, {1500, 17, 900}, {1, 1, 1}, false, 41},
          {12, 1, 128, 32, {777, 3}, {1, 1}, false, 42},
          {14, 2, 64, 24, {1000, 49}, {1, 1}, false, 45},
          {28, 4, 128, 16, {700, 45, 300}, {20, 45, 1}, true, 43},
          {14, 2, 64, 32, {1500, 70, 3}, {33, 70, 2}, false, 46}};
}
// The run without programmatic dependent launch (cluster 2).
inline PagedCase paged_no_pdl_case() { return {14, 2, 64, 16, {513, 64, 1}, {1, 1, 1}, true, 44}; }

// The paged cache of a case: physical blocks shuffled over a pool a few
// blocks larger than needed, a table one entry wider than needed (entries
// past a sequence are ignored), sequences 0 and 1 sharing their prefix
// blocks where asked.
struct PagedLayout {
  int64_t B = 0, NB = 0, max_blocks = 0, N = 0, max_len = 0;
  std::vector<int32_t> table, lens, cu;
};
inline PagedLayout paged_layout(const PagedCase& c) {
  PagedLayout l;
  l.B = int64_t(c.lens.size());
  int64_t total_blocks = 0;
  for (int len : c.lens) {
    l.max_blocks = std::max<int64_t>(l.max_blocks, (len + c.BS - 1) / c.BS);
    total_blocks += (len + c.BS - 1) / c.BS;
  }
  l.max_blocks += 1;
  l.NB = total_blocks + 3;
  std::vector<int32_t> perm(static_cast<size_t>(l.NB));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(c.seed));
  l.table.assign(size_t(l.B * l.max_blocks), 0);
  size_t next = 0;
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t n = 0; n < (c.lens[size_t(b)] + c.BS - 1) / c.BS; ++n)
      l.table[size_t(b * l.max_blocks + n)] = perm[next++];
  if (c.share_prefix && l.B >= 2) {
    const int64_t shared = std::min(c.lens[0], c.lens[1]) / c.BS;
    for (int64_t n = 0; n < shared; ++n) l.table[size_t(l.max_blocks + n)] = l.table[size_t(n)];
  }
  l.lens.assign(c.lens.begin(), c.lens.end());
  l.cu = {0};
  for (int n : c.nq) l.cu.push_back(l.cu.back() + n);
  l.N = l.cu.back();
  for (int len : c.lens) l.max_len = std::max<int64_t>(l.max_len, len);
  return l;
}

// ---- linear_forward_multi ----

struct Layer {
  const char* model;
  const char* layer;
  int64_t K;
  std::vector<int64_t> N;
  bool bias;
};
// The decode step's products of 0.5B and 1.5B: q/k/v (with biases), o,
// gate/up, down.
inline const std::vector<Layer>& qwen_layers() {
  static const std::vector<Layer> v = {
      {"qwen2.5-0.5b", "qkv", 896, {896, 128, 128}, true},  {"qwen2.5-0.5b", "o", 896, {896}, false},
      {"qwen2.5-0.5b", "gate_up", 896, {4864, 4864}, false}, {"qwen2.5-0.5b", "down", 4864, {896}, false},
      {"qwen2.5-1.5b", "qkv", 1536, {1536, 256, 256}, true}, {"qwen2.5-1.5b", "o", 1536, {1536}, false},
      {"qwen2.5-1.5b", "gate_up", 1536, {8960, 8960}, false}, {"qwen2.5-1.5b", "down", 8960, {1536}, false},
  };
  return v;
}

// ---- logprob ----

struct LpCase {
  int64_t N, V, vocab_start;
  float inv_t;
  float range;  // logits uniform in [-range, range]
  bool dlogprob, dentropy;
  DType dtype;
  bool masked = false;  // some logits -inf (never a target)
  uint32_t seed = 0;
};
// Empty and one-row batches, a shard of the vocabulary (vocab_start > 0),
// temperature 0.7, logits up to +-30, f32 and bf16, masked ids, either
// upstream gradient absent, odd V (the unaligned path), Qwen's full vocabulary.
inline std::vector<LpCase> logprob_cases() {
  const float t07 = 1.0f / 0.7f;
  std::vector<LpCase> v = {
      {0, 1000, 0, 1.0f, 5, true, true, DType::bf16},
      {1, 151936, 0, 1.0f, 5, true, true, DType::bf16},
      {37, 1000, 500, t07, 5, true, false, DType::f32, true},
      {37, 1000, 500, t07, 30, false, true, DType::bf16},
      {37, 151936, 0, t07, 30, true, true, DType::bf16},
      {37, 75968, 75968, 1.0f, 5, true, false, DType::bf16, true},
      {1024, 1000, 0, 1.0f, 30, true, true, DType::bf16},
      {1024, 75968, 75968, t07, 5, true, true, DType::bf16},
      {37, 1001, 3, 1.0f, 5, true, true, DType::bf16, true},
      {5, 999, 7, t07, 30, true, true, DType::f32},
      {96, 151936, 0, 1.0f, 30, false, true, DType::f32},
  };
  uint32_t seed = 10;
  for (LpCase& c : v) c.seed = seed, seed += 10;
  return v;
}
inline bool logprob_masked(int64_t v) { return v % 97 == 5; }
inline std::vector<int32_t> logprob_targets(const LpCase& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(size_t(c.N));
  for (auto& x : t) {
    int64_t local;
    do local = int64_t(gen() % uint32_t(c.V));
    while (c.masked && logprob_masked(local));
    x = int32_t(c.vocab_start + local);
  }
  return t;
}
struct LpSplit {
  int64_t N, V, V0;
  float range, inv_t;
};
// Two shards of the vocabulary: Qwen's halves at two spreads and
// temperatures, and an odd split.
inline std::vector<LpSplit> logprob_splits() {
  return {{37, 151936, 75968, 30, 1.0f}, {37, 151936, 75968, 5, 1.0f / 0.7f}, {37, 1000, 501, 5, 1.0f}};
}

// ---- lm_head_sample ----

struct HeadShape {
  int64_t B, V, C;
  float T, scale;
};
// 0.5B's head at a decode step; 64- and 128-row tiles; two, three and five
// m-tiles; K with a tail past the last 64; V with a partial tile and a
// partial part; one row; a vocabulary smaller than one tile; a large one
// (400,000 ids, 2,084 tiles); one 128-row m-tile part full (65, 72, 96
// rows) with 9, 14 (a tail) and 16 k-blocks.
inline const std::vector<HeadShape>& lm_head_shapes() {
  static const std::vector<HeadShape> v = {
      {128, 151936, 896, 1.0f, 0.08f}, {72, 5003, 520, 1.0f, 0.2f},  {65, 3001, 840, 0.9f, 0.15f},
      {96, 3001, 1000, 1.0f, 0.15f},   {5, 1000, 64, 1.0f, 0.5f},    {64, 4099, 200, 0.7f, 0.2f},
      {200, 5003, 128, 1.3f, 0.3f},    {300, 3001, 64, 1.0f, 0.5f},  {513, 777, 72, 1.0f, 0.5f},
      {1, 20000, 1536, 1.0f, 0.05f},   {100, 40, 32, 1.0f, 1.0f},    {3, 400000, 64, 1.0f, 0.5f}};
  return v;
}

// ---- sampling ----

// Random i64 stream ids and counters (as stream_id and positions would be).
inline void sampling_keys(int64_t B, uint32_t seed, std::vector<int64_t>& streams, std::vector<int64_t>& counters) {
  std::mt19937_64 gen(seed);
  streams.resize(size_t(B));
  counters.resize(size_t(B));
  for (int64_t b = 0; b < B; ++b) {
    streams[size_t(b)] = int64_t(stream_id({gen(), uint64_t(b)}));
    counters[size_t(b)] = int64_t(gen() % 100000);
  }
}
inline ops::SamplingParams sampling_params(float temperature, int top_k, float top_p, uint64_t seed) {
  ops::SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

struct SampleRows {
  int64_t B = 0, V = 0;
  std::vector<float> logits;  // (B, V), bf16-exact
  std::vector<int64_t> streams, counters;
  std::vector<int> kind;  // edge rows: which edge (0: plain random)
};
// (256, 1000), (128, 151936) and (7, 3): bf16-exact logits in [-4, 4) scaled
// by 1, 2 or 4 per row (flat to peaked; bf16 values give many exact ties),
// rows 0-2 with the max tied across several ids.
inline std::vector<std::pair<int64_t, int64_t>> many_rows_shapes() { return {{256, 1000}, {128, 151936}, {7, 3}}; }
template <class Exact>
SampleRows many_rows(int64_t B, int64_t V, Exact bf16_exact) {
  SampleRows r;
  r.B = B, r.V = V;
  r.logits = bf16_exact(size_t(B * V), 11 + uint32_t(V), -4, 4);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t v = 0; v < V; ++v) r.logits[size_t(b * V + v)] *= float(1 << (b % 3));
  for (int64_t b = 0; b < std::min<int64_t>(B, 3); ++b) {
    float* row = r.logits.data() + b * V;
    const float mx = *std::max_element(row, row + V);
    for (int64_t v = V / 3; v < V; v += std::max<int64_t>(1, V / 7)) row[v] = mx;
    row[V - 1] = mx;
  }
  sampling_keys(B, 3 + uint32_t(V), r.streams, r.counters);
  return r;
}
// Greedy, and T 0.7 and 1 with top-k 0, 1, 50 and top-p 1, 0.9, 0.5.
inline std::vector<ops::SamplingParams> many_rows_params() {
  std::vector<ops::SamplingParams> v;
  for (const float temp : {0.0f, 0.7f, 1.0f})
    for (const int k : {0, 1, 50})
      for (const float top_p : {1.0f, 0.9f, 0.5f}) {
        if (temp == 0.0f && (k != 0 || top_p != 1.0f)) continue;  // greedy ignores both
        v.push_back(sampling_params(temp, k, top_p, 77));
      }
  return v;
}

// Rows that put the untruncated sampler's draw at the ends of the row or of
// its 32 id ranges (sampling.h), 128 of them for V = 151936, 4753 or 33 (odd
// V: rows at every alignment): kind 1 one huge logit at id 0, 2 at V - 1, 3
// and 4 the mass in the last ids, 5 only the last id finite, 6 -inf logits
// (weight 0, no flag: scattered and trailing), 7 all equal, 8 huge logits on
// both sides of every range boundary, 9 a second half that underflows in
// float (-200), 10 a first half that underflows only in double (-120), 11
// spread x8; rows b % 4 == 0 get the largest u of 2^16 counters, b % 4 ==
// 1 the smallest.
inline const int64_t kEdgeRowsVocabs[] = {151936, 4753, 33};
inline constexpr uint64_t kEdgeRowsSeed = 991;
template <class Exact>
SampleRows edge_rows(int64_t V, Exact bf16_exact) {
  SampleRows r;
  const int64_t B = 128;
  r.B = B, r.V = V;
  const int64_t S = ((V + 31) / 32 + 7) / 8 * 8;  // sampling.cu's range size
  const float ninf = -std::numeric_limits<float>::infinity();
  r.logits = bf16_exact(size_t(B * V), 17 + uint32_t(V), -4, 4);
  r.kind.resize(size_t(B));
  for (int64_t b = 0; b < B; ++b) {
    float* row = r.logits.data() + b * V;
    r.kind[size_t(b)] = int(b % 12);
    switch (r.kind[size_t(b)]) {
      case 1: row[0] = 40; break;
      case 2: row[V - 1] = 40; break;
      case 3:
        for (int64_t v = std::max<int64_t>(0, V - 8); v < V; ++v) row[v] = 12;
        break;
      case 4:
        for (int64_t v = std::max<int64_t>(0, V - 3); v < V; ++v) row[v] = 30;
        break;
      case 5:
        for (int64_t v = 0; v < V - 1; ++v) row[v] = ninf;
        row[V - 1] = 0;
        break;
      case 6:
        for (int64_t v = 0; v < V; v += 97) row[v] = ninf;
        for (int64_t v = std::max<int64_t>(1, V - 5); v < V; ++v) row[v] = ninf;
        break;
      case 7: std::fill(row, row + V, 0.0f); break;
      case 8:
        for (int64_t k = 1; k * S <= V; ++k) {
          row[k * S - 1] = 20;
          if (k * S < V) row[k * S] = 20;
        }
        break;
      case 9:
        for (int64_t v = V / 2; v < V; ++v) row[v] = -200;
        break;
      case 10:
        for (int64_t v = 0; v < V / 2; ++v) row[v] = -120;
        break;
      case 11:
        for (int64_t v = 0; v < V; ++v) row[v] *= 8;
        break;
      default: break;
    }
  }
  sampling_keys(B, 29 + uint32_t(V), r.streams, r.counters);
  for (int64_t b = 0; b < B; b += 4)
    for (const int64_t bb : {b, b + 1}) {
      int64_t best = 0;
      float best_u = bb == b ? -1.0f : 2.0f;
      for (int64_t c = 0; c < (int64_t(1) << 16); ++c) {
        const float u = uniform_float(philox_draw(kEdgeRowsSeed, uint64_t(r.streams[size_t(bb)]), uint64_t(c)).v[0]);
        if (bb == b ? u > best_u : u < best_u) {
          best_u = u;
          best = c;
        }
      }
      r.counters[size_t(bb)] = best;
    }
  return r;
}

}  // namespace dapo::test::shapes
