// CPU reference of token sampling (temperature, top-k, top-p, Philox draw).
// One row per OpenMP iteration, computed sequentially by one thread, so the
// result is the same for any thread count. The "sorted by probability"
// order is only ever materialised for the prefix that is needed: it grows
// by selection (nth_element) and sorting of the next slab, which costs
// O(V) per row when the nucleus is small instead of a full O(V log V) sort.
#include "dapo/ops/sampling.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dapo/core/rng.h"

namespace dapo::ops::cpu {
namespace {

// The deterministic order of the vocabulary: weight descending, then id
// ascending. Ids are unique, so it is a strict total order and every
// correct selection/sort algorithm puts the elements in the same places.
struct ProbabilityOrder {
  const float* w;  // (V)
  bool operator()(int32_t a, int32_t b) const { return w[a] > w[b] || (w[a] == w[b] && a < b); }
};

// idx[0, n) are the candidate ids; idx[0, sorted) is already the sorted top
// of them. extend_to(k) makes idx[0, k) the sorted top k.
struct SortedPrefix {
  int32_t* idx;  // (n)
  const float* w;  // (V)
  int64_t n;
  int64_t sorted = 0;

  void extend_to(int64_t k) {
    k = std::min(k, n);
    if (k <= sorted) return;
    const ProbabilityOrder order{w};
    if (k < n) std::nth_element(idx + sorted, idx + k, idx + n, order);
    std::sort(idx + sorted, idx + k, order);
    sorted = k;
  }

  // The smallest c in [1, n] whose cumulative weight cum (summed in this
  // order, in double) exceeds thr (strict) or reaches it; n if rounding
  // leaves even the whole set short.
  int64_t first_reaching(double thr, bool strict, double& cum) {
    cum = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i == sorted) extend_to(std::max<int64_t>(64, 4 * sorted));
      cum += double(w[idx[i]]);
      if (strict ? cum > thr : cum >= thr) return i + 1;
    }
    return n;
  }
};

}  // namespace

void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor rng_streams,
                   Tensor rng_counters, const SamplingParams& p) {
  DAPO_CHECK_DTYPE(logits, DType::f32);
  DAPO_CHECK(logits.ndim == 2, "logits must be (B, V), got ", logits.shape_string());
  const int64_t B = logits.size(0), V = logits.size(1);
  DAPO_CHECK_SHAPE(tokens, {B});
  DAPO_CHECK_SHAPE(logprobs, {B});
  DAPO_CHECK_SHAPE(rng_streams, {B});
  DAPO_CHECK_SHAPE(rng_counters, {B});
  DAPO_CHECK_DTYPE(tokens, DType::i32);
  DAPO_CHECK_DTYPE(logprobs, DType::f32);
  DAPO_CHECK_DTYPE(rng_streams, DType::i64);
  DAPO_CHECK_DTYPE(rng_counters, DType::i64);
  DAPO_CHECK(V >= 1 && V <= std::numeric_limits<int32_t>::max(), "vocabulary size ", V);
  DAPO_CHECK(p.temperature >= 0.0f && std::isfinite(p.temperature), "temperature ", p.temperature);
  DAPO_CHECK(p.top_p > 0.0f, "top_p ", p.top_p, " must be > 0 (>= 1 disables it)");
  if (B == 0) return;

  const float* x = logits.ptr<float>();                 // (B, V)
  const int64_t* streams = rng_streams.ptr<int64_t>();   // (B)
  const int64_t* counters = rng_counters.ptr<int64_t>(); // (B)
  int32_t* tok = tokens.ptr<int32_t>();                  // (B)
  float* lp = logprobs.ptr<float>();                     // (B)

  if (p.temperature == 0.0f) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      const float* row = x + b * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;  // strict: ties keep the lowest id
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - double(row[best]));
      DAPO_CHECK(std::isfinite(s), "non-finite logits in row ", b);
      tok[b] = int32_t(best);
      lp[b] = float(-std::log(s));  // log p under softmax(logits), temperature 1
    }
    return;
  }

  DAPO_CHECK(ctx.scratch != nullptr, "sample_tokens needs ctx.scratch (8 * V bytes per thread)");
  ArenaScope scope(*ctx.scratch);
  const int nthreads = omp_get_max_threads();
  float* w_all = ctx.scratch->alloc_array<float>(size_t(nthreads) * size_t(V));      // (threads, V)
  int32_t* idx_all = ctx.scratch->alloc_array<int32_t>(size_t(nthreads) * size_t(V)); // (threads, V)
  const float inv_t = 1.0f / p.temperature;  // the same z as logprob ops with this inv_temperature
  const bool use_top_k = p.top_k > 0 && int64_t(p.top_k) < V;
  const bool use_top_p = p.top_p < 1.0f;

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < B; ++b) {
    const int t = omp_get_thread_num();
    float* w = w_all + size_t(t) * size_t(V);        // (V) unnormalised probabilities
    int32_t* idx = idx_all + size_t(t) * size_t(V);  // (V) ids in probability order
    const float* row = x + b * V;

    float m = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v] * inv_t);
    double total = 0;
    for (int64_t v = 0; v < V; ++v) {
      w[v] = std::exp(row[v] * inv_t - m);
      total += w[v];
      idx[v] = int32_t(v);
    }
    // NaN or +inf logits would make the order meaningless (and std::sort unsafe).
    DAPO_CHECK(std::isfinite(total) && total > 0, "non-finite logits in row ", b);

    SortedPrefix prefix{idx, w, V};
    double mass = total;  // of the kept set, summed in the order of the walk
    if (use_top_k) {
      prefix.extend_to(p.top_k);
      prefix.n = p.top_k;
      mass = 0;
      for (int64_t i = 0; i < prefix.n; ++i) mass += double(w[idx[i]]);
    }
    if (use_top_p) {
      double cum = 0;
      prefix.n = prefix.first_reaching(double(p.top_p) * mass, /*strict=*/false, cum);
      mass = cum;
    }

    // The kept set is walked in id order (see sampling.h for why); without
    // truncation idx is still 0..V-1.
    const int64_t n = prefix.n;
    if (use_top_k || use_top_p) std::sort(idx, idx + n);
    const U32x4 r = philox_draw(p.seed, uint64_t(streams[b]), uint64_t(counters[b]));
    const double target = double(uniform_float(r.v[0])) * mass;
    double cum = 0;
    int64_t c = n - 1;
    for (int64_t i = 0; i < n; ++i) {
      cum += double(w[idx[i]]);
      if (cum > target) {
        c = i;
        break;
      }
    }
    // Only when rounding left the walk short: take the last kept token with
    // a non-zero probability.
    while (c > 0 && w[idx[c]] == 0.0f) --c;
    const int32_t chosen = idx[c];

    tok[b] = chosen;
    lp[b] = float(double(row[chosen] * inv_t - m) - std::log(total));
  }
}

}  // namespace dapo::ops::cpu
