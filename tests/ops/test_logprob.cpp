// Log-prob + entropy: forward against a naive double-precision softmax, the
// vocab-sharded three-pass path against the single pass, large logits,
// temperature, backward against finite differences and per shard.
#include "dapo/ops/logprob.h"

#include <algorithm>
#include <limits>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

struct Naive {
  double logprob, entropy, lse;
};

// Textbook softmax in double over one full row (ids from vocab_start).
Naive naive_row(const float* row, int64_t V, int64_t target_local, double inv_t) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v] * inv_t);
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] * inv_t - m);
  const double lse = m + std::log(s);
  double ent = 0;
  for (int64_t v = 0; v < V; ++v) {
    const double logp = row[v] * inv_t - lse;
    if (std::isfinite(logp)) ent -= std::exp(logp) * logp;
  }
  return {row[target_local] * inv_t - lse, ent, lse};
}

std::vector<int32_t> random_targets(int64_t N, int64_t V, int64_t vocab_start, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(N);
  for (auto& x : t) x = int32_t(vocab_start + int64_t(gen() % uint32_t(V)));
  return t;
}

struct Outputs {
  std::vector<float> logprob, entropy, lse;
};

Outputs forward(const std::vector<float>& logits, std::vector<int32_t>& targets, int64_t N, int64_t V,
                int64_t vocab_start, float inv_t) {
  Outputs o{std::vector<float>(N), std::vector<float>(N), std::vector<float>(N)};
  ops::logprob_entropy_forward(test::cpu_ctx(), tensor_f32(o.logprob.data(), {N}),
                               tensor_f32(o.entropy.data(), {N}), tensor_f32(o.lse.data(), {N}),
                               tensor_f32(const_cast<float*>(logits.data()), {N, V}),
                               tensor_i32(targets.data(), {N}), vocab_start, inv_t);
  return o;
}

// The tensor-parallel forward done by hand: every shard's pass 1, a max
// "all-reduce", every shard's pass 2, a sum "all-reduce", then pass 3.
Outputs sharded_forward(const std::vector<float>& logits, std::vector<int32_t>& targets, int64_t N,
                        int64_t V, const std::vector<int64_t>& shard_sizes, float inv_t) {
  const auto ctx = test::cpu_ctx();
  std::vector<std::vector<float>> shards;
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (int64_t s : shard_sizes) {
    std::vector<float> part(N * s);
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(logits.begin() + n * V + start, s, part.begin() + n * s);
    shards.push_back(std::move(part));
    starts.push_back(start);
    start += s;
  }
  EXPECT_EQ(start, V);
  std::vector<float> row_max(N, -std::numeric_limits<float>::infinity()), local_max(N);
  for (size_t r = 0; r < shards.size(); ++r) {
    const int64_t s = shard_sizes[r];
    ops::logits_row_max(ctx, tensor_f32(local_max.data(), {N}), tensor_f32(shards[r].data(), {N, s}),
                        inv_t);
    for (int64_t n = 0; n < N; ++n) row_max[n] = std::max(row_max[n], local_max[n]);
  }
  std::vector<float> sums(N * 3, 0.0f), local(N * 3);
  for (size_t r = 0; r < shards.size(); ++r) {
    const int64_t s = shard_sizes[r];
    ops::logits_partial_sums(ctx, tensor_f32(local.data(), {N, 3}), tensor_f32(shards[r].data(), {N, s}),
                             tensor_i32(targets.data(), {N}), tensor_f32(row_max.data(), {N}),
                             starts[r], inv_t);
    for (int64_t i = 0; i < N * 3; ++i) sums[i] += local[i];
  }
  Outputs o{std::vector<float>(N), std::vector<float>(N), std::vector<float>(N)};
  ops::logprob_entropy_finish(ctx, tensor_f32(o.logprob.data(), {N}), tensor_f32(o.entropy.data(), {N}),
                              tensor_f32(o.lse.data(), {N}), tensor_f32(sums.data(), {N, 3}),
                              tensor_f32(row_max.data(), {N}));
  return o;
}

void expect_matches_naive(const Outputs& o, const std::vector<float>& logits,
                          const std::vector<int32_t>& targets, int64_t N, int64_t V, int64_t vocab_start,
                          float inv_t, double tol) {
  for (int64_t n = 0; n < N; ++n) {
    const Naive r = naive_row(logits.data() + n * V, V, targets[n] - vocab_start, inv_t);
    EXPECT_NEAR(o.logprob[n], r.logprob, tol * (1 + std::fabs(r.logprob))) << "row " << n;
    EXPECT_NEAR(o.entropy[n], r.entropy, tol * (1 + std::fabs(r.entropy))) << "row " << n;
    EXPECT_NEAR(o.lse[n], r.lse, tol * (1 + std::fabs(r.lse))) << "row " << n;
  }
}

TEST(Logprob, ForwardMatchesNaiveSoftmax) {
  // V spans several 2048-wide chunks and is a multiple of nothing; a ramp
  // puts the max of some rows in the last chunk so the running max rescales.
  const int64_t N = 6, V = 5003;
  auto logits = test::random_vector(N * V, 11, -4, 4);
  for (int64_t n = 0; n < N; n += 2)
    for (int64_t v = 0; v < V; ++v) logits[n * V + v] += 6.0f * float(v) / float(V);
  for (float inv_t : {1.0f, 0.6f, 1.7f}) {
    for (int64_t vocab_start : {int64_t(0), int64_t(1000)}) {
      auto targets = random_targets(N, V, vocab_start, 12);
      const Outputs o = forward(logits, targets, N, V, vocab_start, inv_t);
      expect_matches_naive(o, logits, targets, N, V, vocab_start, inv_t, 2e-6);
    }
  }
}

TEST(Logprob, TemperatureScalesLogits) {
  // inv_temperature = 0.5 on x is the same distribution as 1.0 on x / 2.
  const int64_t N = 3, V = 77;
  auto logits = test::random_vector(N * V, 13, -5, 5);
  std::vector<float> half(logits);
  for (auto& x : half) x *= 0.5f;
  auto targets = random_targets(N, V, 0, 14);
  const Outputs a = forward(logits, targets, N, V, 0, 0.5f), b = forward(half, targets, N, V, 0, 1.0f);
  test::expect_close(a.logprob, b.logprob, 1e-6, 1e-6, "logprob");
  test::expect_close(a.entropy, b.entropy, 1e-6, 1e-6, "entropy");
  // ... and a different temperature gives a different answer.
  const Outputs c = forward(logits, targets, N, V, 0, 1.0f);
  EXPECT_GT(std::fabs(c.entropy[0] - a.entropy[0]), 1e-2);
}

TEST(Logprob, ShardedPassesMatchSinglePass) {
  const int64_t N = 5, V = 1001;
  auto logits = test::random_vector(N * V, 21, -6, 6);
  auto targets = random_targets(N, V, 0, 22);
  for (float inv_t : {1.0f, 0.8f}) {
    const Outputs single = forward(logits, targets, N, V, 0, inv_t);
    for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{500, 501},
                                              std::vector<int64_t>{1, 600, 400},
                                              std::vector<int64_t>{334, 333, 334}}) {
      const Outputs sharded = sharded_forward(logits, targets, N, V, sizes, inv_t);
      test::expect_close(sharded.logprob, single.logprob, 2e-6, 2e-6, "logprob");
      test::expect_close(sharded.entropy, single.entropy, 2e-6, 2e-6, "entropy");
      test::expect_close(sharded.lse, single.lse, 2e-6, 2e-6, "lse");
      expect_matches_naive(sharded, logits, targets, N, V, 0, inv_t, 2e-6);
    }
  }
}

TEST(Logprob, LargeLogitsStayFiniteAndAccurate) {
  // Logits around 1e4 (a textbook exp overflows) and spread over +-1e4 (a
  // textbook entropy lse - E[z] cancels two numbers of size 1e4).
  const int64_t N = 4, V = 300;
  auto logits = test::random_vector(N * V, 31, -3, 3);
  for (int64_t v = 0; v < V; ++v) {
    logits[0 * V + v] += 1e4f;
    logits[1 * V + v] -= 1e4f;
    logits[2 * V + v] += (v % 2 ? 1e4f : -1e4f);
    logits[3 * V + v] = v == 7 ? 1e4f : logits[3 * V + v];
  }
  auto targets = random_targets(N, V, 0, 32);
  targets[3] = 7;
  const Outputs o = forward(logits, targets, N, V, 0, 1.0f);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_TRUE(std::isfinite(o.logprob[n]) && std::isfinite(o.entropy[n]) && std::isfinite(o.lse[n]));
    const Naive r = naive_row(logits.data() + n * V, V, targets[n], 1.0);
    EXPECT_NEAR(o.logprob[n], r.logprob, 1e-5 * (1 + std::fabs(r.logprob))) << "row " << n;
    EXPECT_NEAR(o.entropy[n], r.entropy, 1e-5) << "row " << n;
  }
  EXPECT_NEAR(o.logprob[3], 0.0, 1e-6);  // one logit dominates: p = 1, H = 0
  EXPECT_NEAR(o.entropy[3], 0.0, 1e-6);
  const Outputs s = sharded_forward(logits, targets, N, V, {100, 200}, 1.0f);
  test::expect_close(s.logprob, o.logprob, 1e-5, 1e-6, "sharded logprob");
  test::expect_close(s.entropy, o.entropy, 1e-5, 1e-6, "sharded entropy");
}

TEST(Logprob, MaskedLogitsAreIgnored) {
  // -inf logits (e.g. padded vocab entries) have p = 0: no NaN anywhere.
  const int64_t N = 2, V = 9;
  auto logits = test::random_vector(N * V, 41);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v)
      if (v >= 6) logits[n * V + v] = -std::numeric_limits<float>::infinity();
  std::vector<int32_t> targets{2, 5};
  Outputs o = forward(logits, targets, N, V, 0, 1.0f);
  for (int64_t n = 0; n < N; ++n) {
    const Naive r = naive_row(logits.data() + n * V, 6, targets[n], 1.0);
    EXPECT_NEAR(o.logprob[n], r.logprob, 1e-6);
    EXPECT_NEAR(o.entropy[n], r.entropy, 1e-6);
  }
  std::vector<float> dlogits(N * V), g{0.3f, -0.7f}, ge{1.1f, 0.4f};
  ops::logprob_entropy_backward(test::cpu_ctx(), tensor_f32(dlogits.data(), {N, V}),
                                tensor_f32(g.data(), {N}), tensor_f32(ge.data(), {N}),
                                tensor_f32(logits.data(), {N, V}), tensor_i32(targets.data(), {N}),
                                tensor_f32(o.lse.data(), {N}), tensor_f32(o.entropy.data(), {N}), 0, 1.0f);
  for (int64_t i = 0; i < N * V; ++i) {
    EXPECT_TRUE(std::isfinite(dlogits[i])) << i;
    if (i % V >= 6) EXPECT_EQ(dlogits[i], 0.0f) << i;
  }
}

TEST(Logprob, EmptyBatch) {
  std::vector<float> logits(1), out(1);
  std::vector<int32_t> targets(1);
  const auto ctx = test::cpu_ctx();
  ops::logprob_entropy_forward(ctx, tensor_f32(out.data(), {0}), tensor_f32(out.data(), {0}),
                               tensor_f32(out.data(), {0}), tensor_f32(logits.data(), {0, 10}),
                               tensor_i32(targets.data(), {0}), 0, 1.0f);
  ops::logprob_entropy_backward(ctx, tensor_f32(logits.data(), {0, 10}), Tensor{}, Tensor{},
                                tensor_f32(logits.data(), {0, 10}), tensor_i32(targets.data(), {0}),
                                tensor_f32(out.data(), {0}), tensor_f32(out.data(), {0}), 0, 1.0f);
}

// Runs the backward with the given upstream gradients (empty = absent).
std::vector<float> backward(std::vector<float>& logits, std::vector<int32_t>& targets, int64_t N, int64_t V,
                            int64_t vocab_start, float inv_t, std::vector<float>* glp,
                            std::vector<float>* gent, Outputs& fwd) {
  std::vector<float> dlogits(N * V, 12345.0f);  // garbage: the op overwrites
  ops::logprob_entropy_backward(
      test::cpu_ctx(), tensor_f32(dlogits.data(), {N, V}), glp ? tensor_f32(glp->data(), {N}) : Tensor{},
      gent ? tensor_f32(gent->data(), {N}) : Tensor{}, tensor_f32(logits.data(), {N, V}),
      tensor_i32(targets.data(), {N}), tensor_f32(fwd.lse.data(), {N}), tensor_f32(fwd.entropy.data(), {N}),
      vocab_start, inv_t);
  return dlogits;
}

TEST(Logprob, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, V = 37;
  const float inv_t = 0.8f;
  auto logits = test::random_vector(N * V, 51, -3, 3);
  auto targets = random_targets(N, V, 0, 52);
  auto glp = test::random_vector(N, 53), gent = test::random_vector(N, 54);
  Outputs fwd = forward(logits, targets, N, V, 0, inv_t);
  for (int which = 0; which < 3; ++which) {  // both, logprob only, entropy only
    std::vector<float>* a = which == 2 ? nullptr : &glp;
    std::vector<float>* b = which == 1 ? nullptr : &gent;
    const auto dlogits = backward(logits, targets, N, V, 0, inv_t, a, b, fwd);
    // Each row's gradient sums to zero: softmax is invariant to a shift of z.
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += dlogits[n * V + v];
      EXPECT_NEAR(s, 0.0, 1e-6) << "row " << n;
    }
    auto loss = [&] {
      const Outputs o = forward(logits, targets, N, V, 0, inv_t);
      return (a ? test::dot(glp, o.logprob) : 0.0) + (b ? test::dot(gent, o.entropy) : 0.0);
    };
    test::expect_gradient(which == 0 ? "dlogits" : which == 1 ? "dlogits (logprob)" : "dlogits (entropy)",
                          logits, dlogits, loss, 200, 1e-2f, 1e-3, 1e-2);
  }
}

TEST(Logprob, ShardedBackwardIsTheSliceOfTheFullOne) {
  const int64_t N = 3, V = 50, vocab_start = 20, Vs = 17;  // shard [20, 37)
  const float inv_t = 1.3f;
  auto logits = test::random_vector(N * V, 61, -2, 2);
  auto targets = random_targets(N, V, 0, 62);
  targets[0] = 25;  // one target inside the shard, others anywhere
  auto glp = test::random_vector(N, 63), gent = test::random_vector(N, 64);
  Outputs fwd = forward(logits, targets, N, V, 0, inv_t);
  const auto full = backward(logits, targets, N, V, 0, inv_t, &glp, &gent, fwd);
  std::vector<float> shard(N * Vs);
  for (int64_t n = 0; n < N; ++n)
    std::copy_n(logits.begin() + n * V + vocab_start, Vs, shard.begin() + n * Vs);
  const auto part = backward(shard, targets, N, Vs, vocab_start, inv_t, &glp, &gent, fwd);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < Vs; ++v)
      EXPECT_EQ(part[n * Vs + v], full[n * V + vocab_start + v]) << n << " " << v;
}

}  // namespace
}  // namespace dapo
