// rollout::sample_tokens_tp's composition of the shard ops (sampling.h)
// over tp shards that live on one backend, with the collectives done on the
// host: the op harness composes it on the CPU and on the GPU, the sampling
// test against the unsharded GPU op.
#pragma once

#include <cstdint>
#include <vector>

#include "dapo/ops/sampling.h"
#include "dapo/ops/sampling_select.h"
#include "mpi/sampling_tp_cases.h"

namespace dapo::test {

struct TpSampled {
  std::vector<int32_t> tok;
  std::vector<float> lp;
};

// Mem gives the backend's tensors: ctx(), alloc(dtype, dims), get<T>(t),
// put(t, values) and logits(x, B, V, dtype) (x in the backend's dtype).
// rows, streams and counters: (R) on that backend.
template <class Mem>
TpSampled sample_tp_shards(Mem& mem, int tp, const std::vector<float>& x, int64_t B, int64_t V, DType dt,
                           Tensor rows, Tensor streams, Tensor counters, const ops::SamplingParams& p) {
  namespace sd = ops::detail;
  const int64_t R = rows.numel(), Vs = V / tp;
  const ops::Ctx ctx = mem.ctx();
  struct Rank {
    Tensor logits, m, sums, kept, ties, sel, hist, tok, lp;
  };
  std::vector<Rank> rk(static_cast<size_t>(tp));
  for (int q = 0; q < tp; ++q) {
    Rank& k = rk[size_t(q)];
    k.logits = mem.logits(tp_shard(x, B, V, tp, q), B, Vs, dt);
    k.m = mem.alloc(DType::f32, {R});
    k.sums = mem.alloc(DType::i64, {int64_t(tp), R});
    k.kept = mem.alloc(DType::i64, {int64_t(tp), R});
    k.ties = mem.alloc(DType::i64, {int64_t(tp), R});
    k.sel = mem.alloc(DType::i64, {R, sd::kSelectWords});
    k.hist = mem.alloc(DType::i64, {R, 2, sd::kMaxBins});
    k.tok = mem.alloc(DType::i32, {R});
    k.lp = mem.alloc(DType::f32, {R});
  }
  auto block = [&](Tensor g, int q) {
    return Tensor(static_cast<char*>(g.data) + size_t(q * R) * dtype_size(g.dtype), g.dtype, {R}, g.device);
  };
  auto gather = [&](Tensor Rank::*f) {
    std::vector<int64_t> all;
    for (int q = 0; q < tp; ++q) {
      const auto b = mem.template get<int64_t>(block(rk[size_t(q)].*f, q));
      all.insert(all.end(), b.begin(), b.end());
    }
    for (auto& k : rk) mem.put(k.*f, all);
  };
  auto reduce = [&](Tensor Rank::*f, auto zero, auto op) {
    using T = decltype(zero);
    std::vector<T> acc = mem.template get<T>(rk[0].*f);
    for (int q = 1; q < tp; ++q) {
      const auto v = mem.template get<T>(rk[size_t(q)].*f);
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = op(acc[i], v[i]);
    }
    for (auto& k : rk) mem.put(k.*f, acc);
  };
  auto vmax = [](auto a, auto b) { return a > b ? a : b; };
  const float T = p.temperature;
  for (int q = 0; q < tp; ++q) ops::sampling_shard_max(ctx, rk[size_t(q)].m, rk[size_t(q)].logits, rows, T);
  reduce(&Rank::m, 0.0f, vmax);
  for (int q = 0; q < tp; ++q)
    ops::sampling_shard_sum(ctx, block(rk[size_t(q)].sums, q), rk[size_t(q)].logits, rows, rk[size_t(q)].m, T);
  gather(&Rank::sums);
  const bool use_k = p.top_k > 0 && p.top_k < V, use_p = p.top_p < 1.0f;
  ops::SamplingParams pp = p;
  if (T == 0.0f) {
    pp.top_k = 0;
    pp.top_p = 1.0f;
  }
  for (auto& k : rk) ops::sampling_select_begin(ctx, k.sel, pp, 0, V);
  if (T != 0.0f) {
    for (int phase = 0; phase < int(use_k) + int(use_p); ++phase) {
      if (phase == 1)
        for (auto& k : rk) ops::sampling_select_begin(ctx, k.sel, p, 1, V);
      for (int level = 0; level < sd::kLevels; ++level) {
        for (auto& k : rk) ops::sampling_shard_histogram(ctx, k.hist, k.logits, rows, k.m, T, k.sel, level);
        reduce(&Rank::hist, int64_t(0), [](int64_t a, int64_t b) { return a + b; });
        for (auto& k : rk) ops::sampling_descend(ctx, k.sel, k.hist, level, p.top_p);
      }
      for (int q = 0; q < tp; ++q) {
        Rank& k = rk[size_t(q)];
        ops::sampling_shard_tie_count(ctx, block(k.ties, q), k.logits, rows, k.m, T, k.sel);
      }
      gather(&Rank::ties);
      for (int q = 0; q < tp; ++q) {
        Rank& k = rk[size_t(q)];
        ops::sampling_shard_tie_limit(ctx, k.sel, k.ties, q, k.logits, rows, k.m, T);
      }
    }
    for (int q = 0; q < tp; ++q) {
      Rank& k = rk[size_t(q)];
      ops::sampling_shard_kept_mass(ctx, block(k.kept, q), k.logits, rows, k.m, T, k.sel);
    }
    gather(&Rank::kept);
  }
  for (int q = 0; q < tp; ++q) {
    Rank& k = rk[size_t(q)];
    ops::sampling_shard_choose(ctx, k.tok, k.lp, k.logits, rows, k.m, k.sel, k.sums, k.kept, streams, counters, p, q,
                               int64_t(q) * Vs);
  }
  if (T == 0.0f) reduce(&Rank::tok, int32_t(0), [](int32_t a, int32_t b) { return a < b ? a : b; });
  else reduce(&Rank::tok, int32_t(0), vmax);
  reduce(&Rank::lp, 0.0f, vmax);
  return {mem.template get<int32_t>(rk[0].tok), mem.template get<float>(rk[0].lp)};
}

}  // namespace dapo::test
