// CPU reference of token sampling (temperature, top-k, top-p, Philox draw).
// One row per OpenMP iteration, computed sequentially by one thread, so the
// result is the same for any thread count. The "sorted by probability"
// order is only ever materialised for the prefix that is needed: it grows
// by selection (nth_element) and sorting of the next slab, which costs
// O(V) per row when the nucleus is small instead of a full O(V log V) sort.
#include "dapo/ops/sampling.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "dapo/core/rng.h"
#include "dapo/ops/sampling_select.h"
#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/backend_shared.h"

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

// The logits rows the R sampled rows read (logit_rows, or the identity).
struct Rows {
  const float* x;        // (B, V)
  const int32_t* index;  // (R) or null
  int64_t V;
  const float* row(int64_t r) const { return x + (index ? int64_t(index[r]) : r) * V; }
};

// The shapes are checked by the ops:: functions. The CPU's own: f32 logits,
// and the row ids, which only the host reads before any thread uses them.
Rows check_rows(Tensor logits, Tensor logit_rows, int64_t R, const char* what) {
  DAPO_CHECK_DTYPE(logits, DType::f32);
  const int64_t B = logits.size(0), V = logits.size(1);
  Rows rows{logits.ptr<float>(), nullptr, V};
  if (has_logit_rows(logit_rows)) {
    rows.index = logit_rows.ptr<int32_t>();
    for (int64_t r = 0; r < R; ++r)
      DAPO_CHECK(rows.index[r] >= 0 && rows.index[r] < B, what, ": logit_rows[", r, "] = ", rows.index[r],
                 " outside [0, ", B, ")");
  }
  return rows;
}

}  // namespace

void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                   Tensor rng_streams, Tensor rng_counters, const SamplingParams& p) {
  const int64_t B = tokens.numel();  // the sampled rows (R in sampling.h)
  const Rows rows = check_rows(logits, logit_rows, B, "sample_tokens");
  const int64_t V = logits.size(1);
  if (B == 0) return;

  const int64_t* streams = rng_streams.ptr<int64_t>();   // (B)
  const int64_t* counters = rng_counters.ptr<int64_t>(); // (B)
  int32_t* tok = tokens.ptr<int32_t>();                  // (B)
  float* lp = logprobs.ptr<float>();                     // (B)

  if (p.temperature == 0.0f) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      const float* row = rows.row(b);
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
    const float* row = rows.row(b);

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

// ---- tp shard steps (sampling.h; the decisions are sampling_select.h's) ----
namespace {

using namespace ops::detail;

// The weight exactly as sample_tokens computes it.
float weight(float x, float inv_t, float m) { return std::exp(x * inv_t - m); }
uint32_t key_of(float w) {
  uint32_t k;
  std::memcpy(&k, &w, sizeof k);
  return k;
}
float inv_t_of(float temperature) { return temperature > 0.0f ? 1.0f / temperature : 1.0f; }

// Typed views of the tensors the ops:: functions checked.
Select* selects(Tensor select) { return reinterpret_cast<Select*>(select.data); }
double* f64_of(Tensor t) { return reinterpret_cast<double*>(t.data); }

// The r-th (1-based) tie at s.cut.thr inside s.within, in id order (-1: none).
int32_t rth_tie(const float* row, int64_t V, float inv_t, float m, const Select& s, int64_t r) {
  for (int64_t v = 0; v < V; ++v) {
    const uint32_t key = key_of(weight(row[v], inv_t, m));
    if (key == s.cut.thr && in_cut(s.within, key, int32_t(v)) && --r == 0) return int32_t(v);
  }
  return -1;
}

bool kept(const Select& s, uint32_t key, int32_t v) { return in_cut(s.within, key, v) && in_cut(s.cut, key, v); }

}  // namespace

void sampling_shard_max(const Ctx&, Tensor out, Tensor logits, Tensor logit_rows, float temperature) {
  const int64_t R = out.numel();
  const Rows rows = check_rows(logits, logit_rows, R, "sampling_shard_max");
  float* o = out.ptr<float>();
  const float inv_t = inv_t_of(temperature);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    const float* row = rows.row(r);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < rows.V; ++v) mx = std::max(mx, temperature > 0.0f ? row[v] * inv_t : row[v]);
    o[r] = mx;
  }
}

void sampling_shard_sum(const Ctx&, Tensor out, Tensor logits, Tensor logit_rows, Tensor m, float temperature) {
  const int64_t R = out.numel();
  const Rows rows = check_rows(logits, logit_rows, R, "sampling_shard_sum");
  double* o = f64_of(out);
  const float* mr = m.ptr<float>();
  const float inv_t = inv_t_of(temperature);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    const float* row = rows.row(r);
    double s = 0;
    for (int64_t v = 0; v < rows.V; ++v)
      s += temperature > 0.0f ? double(weight(row[v], inv_t, mr[r])) : std::exp(double(row[v]) - double(mr[r]));
    o[r] = s;
  }
}

void sampling_select_begin(const Ctx&, Tensor select, const SamplingParams& p, int phase, int64_t vocab) {
  const int64_t R = select.ndim == 2 ? select.size(0) : 0;
  Select* s = selects(select);
  const bool use_k = p.top_k > 0 && int64_t(p.top_k) < vocab;
  for (int64_t r = 0; r < R; ++r) {
    if (phase == 1) {
      start_top_p(s[r], true, p.top_p);
      continue;
    }
    s[r] = select_none();
    if (use_k) start_top_k(s[r], p.top_k);
    else if (p.top_p < 1.0f) start_top_p(s[r], false, p.top_p);
  }
}

void sampling_shard_histogram(const Ctx&, Tensor hist, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select, int level) {
  const int64_t R = m.numel();
  const Rows rows = check_rows(logits, logit_rows, R, "sampling_shard_histogram");
  const Select* s = selects(select);
  const float* mr = m.ptr<float>();
  const float inv_t = inv_t_of(temperature);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    int64_t* count = hist.ptr<int64_t>() + r * 2 * kMaxBins;
    int64_t* units = count + kMaxBins;
    std::fill(count, count + 2 * kMaxBins, int64_t(0));
    if (s[r].state != kDescending) continue;
    const float* row = rows.row(r);
    for (int64_t v = 0; v < rows.V; ++v) {
      const uint32_t key = key_of(weight(row[v], inv_t, mr[r]));
      if (!in_level(s[r], level, key, int32_t(v))) continue;
      const uint32_t d = key_digit(key, level);
      ++count[d];
      units[d] += mass_units(key);
    }
  }
}

void sampling_descend(const Ctx&, Tensor select, Tensor hist, int level, float top_p) {
  const int64_t R = select.ndim == 2 ? select.size(0) : 0;
  Select* s = selects(select);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t* h = hist.ptr<int64_t>() + r * 2 * kMaxBins;
    descend(s[r], h, h + kMaxBins, level, top_p);
  }
}

void sampling_shard_tie_count(const Ctx&, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  const int64_t R = out.numel();
  const Rows rows = check_rows(logits, logit_rows, R, "sampling_shard_tie_count");
  const Select* s = selects(select);
  const float* mr = m.ptr<float>();
  const float inv_t = inv_t_of(temperature);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    int64_t n = 0;
    if (s[r].state == kNeedTie) {
      const float* row = rows.row(r);
      for (int64_t v = 0; v < rows.V; ++v) {
        const uint32_t key = key_of(weight(row[v], inv_t, mr[r]));
        n += key == s[r].cut.thr && in_cut(s[r].within, key, int32_t(v));
      }
    }
    out.ptr<int64_t>()[r] = n;
  }
}

void sampling_shard_tie_limit(const Ctx&, Tensor select, Tensor tie_counts, int rank, Tensor logits,
                              Tensor logit_rows, Tensor m, float temperature) {
  const int64_t R = m.numel();
  const Rows rows = check_rows(logits, logit_rows, R, "sampling_shard_tie_limit");
  Select* s = selects(select);
  const float* mr = m.ptr<float>();
  const float inv_t = inv_t_of(temperature);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    if (s[r].state != kNeedTie) continue;
    const int64_t k = local_ties_kept(s[r], tie_counts.ptr<int64_t>() + r, R, rank);
    s[r].cut.lim = k == 0 ? -1 : k < 0 ? kNoLimit : rth_tie(rows.row(r), rows.V, inv_t, mr[r], s[r], k);
    s[r].state = kIdle;
  }
}

void sampling_shard_kept_mass(const Ctx&, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  const int64_t R = out.numel();
  const Rows rows = check_rows(logits, logit_rows, R, "sampling_shard_kept_mass");
  double* o = f64_of(out);
  const Select* s = selects(select);
  const float* mr = m.ptr<float>();
  const float inv_t = inv_t_of(temperature);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    const float* row = rows.row(r);
    double sum = 0;
    for (int64_t v = 0; v < rows.V; ++v) {
      const float w = weight(row[v], inv_t, mr[r]);
      if (kept(s[r], key_of(w), int32_t(v))) sum += double(w);
    }
    o[r] = sum;
  }
}

void sampling_shard_choose(const Ctx&, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                           Tensor m, Tensor select, Tensor sums, Tensor kept_t, Tensor rng_streams,
                           Tensor rng_counters, const SamplingParams& p, int rank, int64_t vocab_start) {
  const int64_t R = tokens.numel();
  const Rows rows = check_rows(logits, logit_rows, R, "sampling_shard_choose");
  const int tp = int(sums.size(0));
  const double* sum = f64_of(sums);
  const double* kept_mass = f64_of(kept_t);
  const Select* s = selects(select);
  const float* mr = m.ptr<float>();
  const float inv_t = inv_t_of(p.temperature);
  int32_t* tok = tokens.ptr<int32_t>();
  float* lp = logprobs.ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    double total = 0;
    for (int q = 0; q < tp; ++q) total += sum[q * R + r];
    DAPO_CHECK(std::isfinite(total) && total > 0, "non-finite logits in row ", r);
    const float* row = rows.row(r);
    if (p.temperature == 0.0f) {
      int32_t id = INT32_MAX;
      for (int64_t v = 0; v < rows.V && id == INT32_MAX; ++v)
        if (row[v] == mr[r]) id = int32_t(vocab_start + v);
      tok[r] = id;
      lp[r] = float(-std::log(total));
      continue;
    }
    double mass = 0;
    for (int q = 0; q < tp; ++q) mass += kept_mass[q * R + r];
    const U32x4 d = philox_draw(p.seed, uint64_t(rng_streams.ptr<int64_t>()[r]),
                                uint64_t(rng_counters.ptr<int64_t>()[r]));
    const double target = double(uniform_float(d.v[0])) * mass;
    double before = 0;
    if (holder_shard(kept_mass + r, R, tp, target, &before) != rank) {
      tok[r] = -1;
      lp[r] = -std::numeric_limits<float>::infinity();
      continue;
    }
    const double residual = target - before;
    double cum = 0;
    int64_t chosen = -1, last = -1;
    for (int64_t v = 0; v < rows.V; ++v) {
      const float w = weight(row[v], inv_t, mr[r]);
      if (!kept(s[r], key_of(w), int32_t(v)) || w == 0.0f) continue;
      last = v;
      cum += double(w);
      if (cum > residual) {
        chosen = v;
        break;
      }
    }
    if (chosen < 0) chosen = last < 0 ? 0 : last;
    tok[r] = int32_t(vocab_start + chosen);
    lp[r] = float(double(row[chosen] * inv_t - mr[r]) - std::log(total));
  }
}

}  // namespace dapo::ops::cpu
