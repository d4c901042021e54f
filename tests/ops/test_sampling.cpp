// Token sampling: greedy and its equivalents, empirical frequencies against
// the truncated/renormalised distribution, a naive full-sort sampler with
// the same Philox draw, invariance to the batch and the thread count, and
// the reported log-probability.
#include "dapo/ops/sampling.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "dapo/core/rng.h"
#include "ops/op_test_util.h"
#include "ops/sampling_test_util.h"

namespace dapo {
namespace {

struct Sampler {
  Arena arena{size_t(64) << 20, Device::cpu, "test_sampling"};
  ops::Ctx ctx = [this] {
    ops::Ctx c;
    c.scratch = &arena;
    return c;
  }();

  // Samples every row; returns tokens and fills logprobs.
  std::vector<int32_t> run(std::vector<float>& logits, int64_t V, std::vector<int64_t>& streams,
                           std::vector<int64_t>& counters, const ops::SamplingParams& p,
                           std::vector<float>* logprobs = nullptr) {
    const int64_t B = int64_t(streams.size());
    std::vector<int32_t> tokens(B, -1);
    std::vector<float> lp(B);
    ops::sample_tokens(ctx, tensor_i32(tokens.data(), {B}), tensor_f32(lp.data(), {B}),
                       tensor_f32(logits.data(), {B, V}), Tensor{}, tensor_i64(streams.data(), {B}),
                       tensor_i64(counters.data(), {B}), p);
    EXPECT_EQ(arena.used(), 0u) << "scratch not released";
    if (logprobs) *logprobs = lp;
    return tokens;
  }
};

ops::SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 2024) {
  ops::SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

// log softmax(row / T) in double.
std::vector<double> log_softmax(const float* row, int64_t V, double temperature) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v] / temperature);
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] / temperature - m);
  std::vector<double> out(V);
  for (int64_t v = 0; v < V; ++v) out[v] = row[v] / temperature - m - std::log(s);
  return out;
}

// The distribution the sampler should draw from, written the obvious way:
// full sort by (p desc, id asc), cut at top-k, renormalise, cut at top-p,
// renormalise. Returns per-token probabilities (0 for dropped tokens) and
// the sorted ids.
std::vector<double> truncated_distribution(const float* row, int64_t V, const ops::SamplingParams& p,
                                           std::vector<int32_t>* order_out = nullptr) {
  const auto logp = log_softmax(row, V, p.temperature);
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logp[a] > logp[b] || (logp[a] == logp[b] && a < b);
  });
  int64_t keep = V;
  if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
  double mass = 0;
  for (int64_t i = 0; i < keep; ++i) mass += std::exp(logp[order[i]]);
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int64_t i = 0; i < keep; ++i) {
      cum += std::exp(logp[order[i]]) / mass;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::vector<double> q(V, 0.0);
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += std::exp(logp[order[i]]);
  for (int64_t i = 0; i < keep; ++i) q[order[i]] = std::exp(logp[order[i]]) / kept;
  if (order_out) *order_out = order;
  return q;
}

int32_t argmax(const float* row, int64_t V) {
  int32_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (row[v] > row[best]) best = int32_t(v);
  return best;
}

// B copies of one row, each with its own counter.
std::vector<float> repeat_row(const std::vector<float>& row, int64_t B) {
  std::vector<float> out;
  out.reserve(row.size() * B);
  for (int64_t b = 0; b < B; ++b) out.insert(out.end(), row.begin(), row.end());
  return out;
}

TEST(Sampling, GreedyIsArgmaxWithTiesToLowestId) {
  const int64_t B = 5, V = 1003;
  auto logits = test::random_vector(B * V, 1, -5, 5);
  logits[1 * V + 17] = 9.0f;  // a tie for the max: id 17 wins over id 500
  logits[1 * V + 500] = 9.0f;
  logits[2 * V + V - 1] = 9.5f;  // max at the last id
  std::vector<int64_t> streams(B, 7), counters{0, 1, 2, 3, 4};
  Sampler s;
  std::vector<float> lp;
  const auto tokens = s.run(logits, V, streams, counters, params(0.0f, 5, 0.5f), &lp);
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(tokens[b], argmax(&logits[b * V], V)) << "row " << b;
    const auto ref = log_softmax(&logits[b * V], V, 1.0);  // greedy reports temperature-1 log-probs
    EXPECT_NEAR(lp[b], ref[tokens[b]], 1e-5) << "row " << b;
  }
  EXPECT_EQ(tokens[1], 17);
  EXPECT_EQ(tokens[2], V - 1);
}

TEST(Sampling, TopK1AndTinyTopPAreGreedy) {
  const int64_t B = 200, V = 301;
  auto logits = test::random_vector(B * V, 2, -3, 3);
  logits[5 * V + 3] = logits[5 * V + 200] = 4.0f;  // tie: id 3
  std::vector<int64_t> streams(B), counters(B);
  for (int64_t b = 0; b < B; ++b) streams[b] = int64_t(stream_id({1, uint64_t(b)})), counters[b] = b;
  Sampler s;
  for (const auto& p : {params(1.0f, 1), params(2.0f, 1, 0.9f), params(1.0f, 0, 1e-6f),
                        params(0.7f, 10, 1e-6f)}) {
    const auto tokens = s.run(logits, V, streams, counters, p);
    for (int64_t b = 0; b < B; ++b) ASSERT_EQ(tokens[b], argmax(&logits[b * V], V)) << "row " << b;
    EXPECT_EQ(tokens[5], 3);
  }
}

// Draws many counters of one row and checks the counts against the expected
// distribution: tokens outside it never appear, and a chi-square statistic
// stays below a bound that a wrong distribution exceeds.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& q, int64_t n, int* df) {
  double chi2 = 0;
  *df = -1;
  for (size_t v = 0; v < q.size(); ++v) {
    if (q[v] == 0) {
      if (counts[v] > 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double e = q[v] * double(n);
    chi2 += (double(counts[v]) - e) * (double(counts[v]) - e) / e;
    ++*df;
  }
  return chi2;
}

TEST(Sampling, FrequenciesMatchTruncatedDistribution) {
  // Ties (1.5, 1.5) exercise the id tie-break; cut points of top-p are far
  // from the cumulative sums so rounding cannot move them.
  const std::vector<float> row{1.0f, 2.0f, 1.5f, 1.5f, 0.3f, 0.0f, -0.5f, -1.0f, -2.0f, -3.0f, 0.9f};
  const int64_t V = int64_t(row.size()), n = 40000;
  auto logits = repeat_row(row, n);
  std::vector<int64_t> streams(n, int64_t(stream_id({3, 1, 4}))), counters(n);
  std::iota(counters.begin(), counters.end(), int64_t(100));
  Sampler s;
  for (const auto& p : {params(1.0f), params(0.6f), params(1.0f, 3), params(1.4f, 0, 0.8f),
                        params(1.0f, 5, 0.7f), params(2.0f, 4)}) {
    const auto tokens = s.run(logits, V, streams, counters, p);
    std::vector<int64_t> counts(V, 0);
    for (int32_t t : tokens) {
      ASSERT_TRUE(t >= 0 && t < V);
      ++counts[t];
    }
    const auto q = truncated_distribution(row.data(), V, p);
    int df = 0;
    const double chi2 = chi_square(counts, q, n, &df);
    // For df <= 10 the 1e-6 tail of chi-square lies below 3 * df + 25.
    EXPECT_LT(chi2, 3.0 * df + 25) << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p;
    for (int64_t v = 0; v < V; ++v)
      if (q[v] == 0) EXPECT_EQ(counts[v], 0) << "token " << v << " is outside the kept set";
    // The test has power: the same counts against a slightly different
    // temperature fail clearly.
    ops::SamplingParams wrong = p;
    wrong.temperature *= 1.25f;
    const double chi2_wrong = chi_square(counts, truncated_distribution(row.data(), V, wrong), n, &df);
    EXPECT_GT(chi2_wrong, 3.0 * df + 25) << "T=" << p.temperature;
  }
}

TEST(Sampling, MatchesNaiveSamplerAndReportsFullLogprob) {
  // The op against a naive sampler: full sort, cut, renormalise, invert the
  // CDF over the kept tokens in id order at the same Philox uniform. Large V
  // makes the op's prefix grow.
  const int64_t B = 48, V = 3001;
  auto logits = test::random_vector(B * V, 3, -3, 3);
  for (int64_t b = 0; b < B; b += 3) logits[b * V + 10] = logits[b * V + 11];  // some exact ties
  std::vector<int64_t> streams(B), counters(B);
  for (int64_t b = 0; b < B; ++b) streams[b] = int64_t(stream_id({9, uint64_t(b % 5)})), counters[b] = b * 7;
  Sampler s;
  for (const auto& p : {params(1.0f), params(0.7f, 0, 0.9f), params(1.0f, 50), params(1.2f, 200, 0.5f),
                        params(3.0f, 0, 0.95f)}) {
    std::vector<float> lp;
    const auto tokens = s.run(logits, V, streams, counters, p, &lp);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int32_t> order;
      const auto q = truncated_distribution(&logits[b * V], V, p, &order);
      const double u = uniform_float(philox_draw(p.seed, uint64_t(streams[b]), uint64_t(counters[b])).v[0]);
      double cum = 0;
      int32_t want = -1;
      for (int32_t id = 0; id < int32_t(V); ++id) {
        if (q[id] == 0) continue;
        cum += q[id];
        want = id;
        if (cum > u) break;
      }
      EXPECT_EQ(tokens[b], want) << "row " << b << " T=" << p.temperature << " k=" << p.top_k
                                 << " p=" << p.top_p;
      const auto ref = log_softmax(&logits[b * V], V, p.temperature);
      EXPECT_NEAR(lp[b], ref[tokens[b]], 2e-5) << "row " << b;  // the full, untruncated distribution
    }
  }
}

TEST(Sampling, NearTiesSwappedByRoundingDoNotChangeTheToken) {
  // Two forwards that agree up to the last bits of the logits (a cached and a
  // full forward, or tp = 1 and tp = 2) must sample the same token: nudging
  // every logit by one ulp in either direction reorders near-equal
  // probabilities but leaves the draw alone.
  const int64_t B = 64, V = 800;
  // Few distinct values: many exact ties, which the two versions break in
  // opposite directions by one ulp.
  auto base = test::random_vector(B * V, 21, -1, 1);
  std::vector<float> logits(B * V), nudged(B * V);
  for (int64_t i = 0; i < B * V; ++i) {
    const float v = std::round(base[i] * 4) / 4;
    logits[i] = (i % 2) ? std::nextafter(v, 2.0f) : v;
    nudged[i] = (i % 2) ? v : std::nextafter(v, 2.0f);
  }
  std::vector<int64_t> streams(B), counters(B);
  for (int64_t b = 0; b < B; ++b) streams[b] = int64_t(stream_id({3, uint64_t(b)})), counters[b] = b;
  Sampler s;
  for (const auto& p : {params(1.0f), params(1.0f, 0, 0.9f), params(0.8f, 300)}) {
    const auto a = s.run(logits, V, streams, counters, p, nullptr);
    const auto b = s.run(nudged, V, streams, counters, p, nullptr);
    int64_t differ = 0;
    for (int64_t r = 0; r < B; ++r) differ += a[r] != b[r];
    EXPECT_LE(differ, 1) << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p;
  }
}

TEST(Sampling, RowResultIndependentOfBatchAndThreads) {
  // The same (seed, stream, counter) and logits give the same token and
  // log-prob wherever the row sits, whatever else is in the batch, and for
  // any number of threads.
  const int64_t R = 12, V = 517;
  auto rows = test::random_vector(R * V, 4, -2, 2);
  std::vector<int64_t> streams(R), counters(R);
  for (int64_t r = 0; r < R; ++r) streams[r] = int64_t(stream_id({5, uint64_t(r), 0})), counters[r] = 40 + r;
  const auto p = params(0.9f, 100, 0.95f, 77);
  Sampler s;
  std::vector<float> lp_ref;
  const auto ref = s.run(rows, V, streams, counters, p, &lp_ref);

  // Reversed, interleaved with unrelated rows, in a batch of another size.
  auto noise = test::random_vector(R * V, 5, -2, 2);
  std::vector<float> mixed;
  std::vector<int64_t> mixed_streams, mixed_counters;
  for (int64_t r = R - 1; r >= 0; --r) {
    mixed.insert(mixed.end(), noise.begin() + r * V, noise.begin() + (r + 1) * V);
    mixed_streams.push_back(int64_t(stream_id({6, uint64_t(r)})));
    mixed_counters.push_back(r);
    mixed.insert(mixed.end(), rows.begin() + r * V, rows.begin() + (r + 1) * V);
    mixed_streams.push_back(streams[r]);
    mixed_counters.push_back(counters[r]);
  }
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> lp;
    const auto got = s.run(mixed, V, mixed_streams, mixed_counters, p, &lp);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t pos = 2 * (R - 1 - r) + 1;
      EXPECT_EQ(got[pos], ref[r]) << "row " << r << " threads " << threads;
      EXPECT_EQ(lp[pos], lp_ref[r]) << "row " << r << " threads " << threads;
    }
    // Alone in a batch of one.
    std::vector<float> one(rows.begin() + 3 * V, rows.begin() + 4 * V);
    std::vector<int64_t> st{streams[3]}, ct{counters[3]};
    EXPECT_EQ(s.run(one, V, st, ct, p)[0], ref[3]);
  }
  omp_set_num_threads(saved_threads);
  // A different seed, stream or counter changes the draws.
  int differ = 0;
  const auto other_seed = s.run(rows, V, streams, counters, params(0.9f, 100, 0.95f, 78));
  for (int64_t r = 0; r < R; ++r) differ += other_seed[r] != ref[r];
  EXPECT_GT(differ, 0);
}

TEST(Sampling, EmptyBatchAndMissingScratch) {
  std::vector<float> logits(4);
  std::vector<int64_t> none;
  Sampler s;
  EXPECT_TRUE(s.run(logits, 4, none, none, params(1.0f)).empty());
  // Greedy needs no scratch.
  std::vector<int32_t> tok(1);
  std::vector<float> lp(1);
  std::vector<int64_t> st{0}, ct{0};
  logits = {0.1f, 0.3f, -1.0f, 0.2f};
  ops::sample_tokens(test::cpu_ctx(), tensor_i32(tok.data(), {1}), tensor_f32(lp.data(), {1}),
                     tensor_f32(logits.data(), {1, 4}), Tensor{}, tensor_i64(st.data(), {1}), tensor_i64(ct.data(), {1}),
                     params(0.0f));
  EXPECT_EQ(tok[0], 1);
}

// logit_rows: row r samples from logits[logit_rows[r]], exactly as from a
// materialised copy of that row; an empty Tensor is the identity; an index
// outside [0, B) is an error.
TEST(Sampling, LogitRowsSampleTheIndexedRows) {
  const int64_t B = 5, V = 300;
  std::vector<float> logits = test::random_vector(size_t(B * V), 8, -3, 3);
  const std::vector<int32_t> index = {4, 0, 0, 2, 4, 4, 1, 3};
  const int64_t R = int64_t(index.size());
  std::vector<float> copy;
  for (const int32_t b : index) copy.insert(copy.end(), logits.begin() + b * V, logits.begin() + (b + 1) * V);
  std::vector<int64_t> streams(R), counters(R);
  for (int64_t r = 0; r < R; ++r) {
    streams[r] = int64_t(stream_id({uint64_t(r)}));
    counters[r] = 10 + r;
  }
  Sampler s;
  for (const auto& p : {params(0.0f), params(0.9f), params(1.1f, 7), params(0.8f, 0, 0.7f)}) {
    std::vector<float> want_lp;
    const auto want = s.run(copy, V, streams, counters, p, &want_lp);
    std::vector<int32_t> idx = index, tok(R);
    std::vector<float> lp(R);
    ops::sample_tokens(s.ctx, tensor_i32(tok.data(), {R}), tensor_f32(lp.data(), {R}),
                       tensor_f32(logits.data(), {B, V}), tensor_i32(idx.data(), {R}),
                       tensor_i64(streams.data(), {R}), tensor_i64(counters.data(), {R}), p);
    EXPECT_EQ(tok, want);
    EXPECT_EQ(std::memcmp(lp.data(), want_lp.data(), size_t(R) * sizeof(float)), 0);
  }
  // An empty Tensor of shape (0) is the identity too.
  std::vector<int32_t> tok(B), none;
  std::vector<float> lp(B);
  std::vector<int64_t> st(streams.begin(), streams.begin() + B), ct(counters.begin(), counters.begin() + B);
  const auto want = s.run(logits, V, st, ct, params(1.0f));
  ops::sample_tokens(s.ctx, tensor_i32(tok.data(), {B}), tensor_f32(lp.data(), {B}), tensor_f32(logits.data(), {B, V}),
                     tensor_i32(none.data(), {0}), tensor_i64(st.data(), {B}), tensor_i64(ct.data(), {B}),
                     params(1.0f));
  EXPECT_EQ(tok, want);
  std::vector<int32_t> bad = {0, 5};
  EXPECT_DEATH(ops::sample_tokens(s.ctx, tensor_i32(tok.data(), {2}), tensor_f32(lp.data(), {2}),
                                  tensor_f32(logits.data(), {B, V}), tensor_i32(bad.data(), {2}),
                                  tensor_i64(st.data(), {2}), tensor_i64(ct.data(), {2}), params(1.0f)),
               "logit_rows");
}

// 200k draws of one row of 64 logits (each with its own counter, fixed seed:
// deterministic) against the truncated, renormalised softmax: chi-square
// below its 1e-6 upper quantile, and no draw outside the kept set. The GPU
// test runs the same statistic on the CUDA op.
TEST(Sampling, ChiSquareOf200kDraws) {
  const int64_t V = 64, N = 200000;
  const std::vector<float> row = test::random_vector(size_t(V), 21, -2.5f, 2.5f);
  std::vector<float> logits = repeat_row(row, N);
  std::vector<int64_t> streams(N, int64_t(stream_id({1, 2, 3}))), counters(N);
  std::iota(counters.begin(), counters.end(), int64_t(0));
  Sampler s;
  for (const auto& p : test::chi_square_params()) {
    const auto q = test::expected_distribution(row.data(), V, p);
    const auto tok = s.run(logits, V, streams, counters, p);
    const test::ChiSquare c = test::chi_square(tok, q);
    const double limit = test::chi_square_quantile_1e6(c.df);
    std::printf("cpu chi-square T %.1f top_k %d top_p %.2f: %.1f, %d dof (limit %.1f)\n", p.temperature, p.top_k,
                p.top_p, c.stat, c.df, limit);
    EXPECT_EQ(c.outside, 0);
    EXPECT_LT(c.stat, limit);
  }
}

}  // namespace
}  // namespace dapo
