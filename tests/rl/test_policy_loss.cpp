// The DAPO policy loss: values and metrics against a naive double-precision
// transcription of verl's formulas on padded (sequence x position)
// matrices, for every aggregation mode with and without KL and entropy
// terms; gradients against finite differences; the invariance of the total
// gradient and loss to splitting a mini-batch into micro-batches and dp
// shards (with the global normaliser - and that local normalisers break
// it); a table of hand-computed values; misuse.
#include "dapo/rl/policy_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dapo/rl/response_tokens.h"

namespace dapo {
namespace {

using rl::LossCounts;
using rl::PolicyLossMetrics;
using rl::PolicyLossOptions;

// A packed micro-batch built the way the trainer builds one.
struct Batch {
  std::vector<int32_t> offsets{0};
  std::vector<float> logp, old, adv, ref, ent;
  std::vector<uint8_t> mask;

  int64_t T() const { return int64_t(logp.size()); }
  int64_t S() const { return int64_t(offsets.size()) - 1; }
  rl::PolicyLossInputs inputs(bool with_ref, bool with_ent) const {
    rl::PolicyLossInputs in;
    in.logprob = logp;
    in.old_logprob = old;
    in.advantages = adv;
    in.mask = mask;
    in.seq_offsets = offsets;
    if (with_ref) in.ref_logprob = ref;
    if (with_ent) in.entropy = ent;
    return in;
  }
  // Sequences [a, b) as a micro-batch of their own.
  Batch sub(int64_t a, int64_t b) const {
    Batch o;
    for (int64_t s = a; s < b; ++s) {
      for (int32_t t = offsets[size_t(s)]; t < offsets[size_t(s) + 1]; ++t) {
        o.logp.push_back(logp[size_t(t)]);
        o.old.push_back(old[size_t(t)]);
        o.adv.push_back(adv[size_t(t)]);
        o.ref.push_back(ref[size_t(t)]);
        o.ent.push_back(ent[size_t(t)]);
        o.mask.push_back(mask[size_t(t)]);
      }
      o.offsets.push_back(int32_t(o.logp.size()));
    }
    return o;
  }
};

// S sequences of random prompt/response lengths; about one in six is
// masked out entirely (overlong filtering). Log-ratios mostly in
// [-0.7, 1.4] (every clip region; the dual clip starts at ln 3 = 1.1), a
// few beyond the +-20 clamp; KL log-ratios in [-3, 3] and a few with k3
// beyond its clamp at 10.
Batch random_batch(int S, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Batch b;
  for (int s = 0; s < S; ++s) {
    const int64_t P = 1 + int64_t(gen() % 4), R = int64_t(gen() % 7);
    const bool in_loss = gen() % 6 != 0;
    const float A = gen() % 5 == 0 ? 0.0f : float(4 * u(gen) - 2);
    std::vector<uint8_t> m(size_t(P + R));
    rl::fill_response_mask(P, R, in_loss, m);
    for (int64_t t = 0; t < P + R; ++t) {
      const float lp = float(-3 * u(gen) - 0.01);
      double d = 2.1 * u(gen) - 0.7;
      if (gen() % 23 == 0) d = u(gen) < 0.5 ? 25.0 : -25.0;
      double k = 6 * u(gen) - 3;
      if (gen() % 19 == 0) k = 15;
      b.logp.push_back(lp);
      b.old.push_back(float(lp - d));
      b.adv.push_back(m[size_t(t)] ? A : 99.0f);  // off-mask values must not matter
      b.ref.push_back(float(lp + k));
      b.ent.push_back(float(3 * u(gen)));
      b.mask.push_back(m[size_t(t)]);
    }
    b.offsets.push_back(int32_t(b.logp.size()));
  }
  return b;
}

struct Reference {
  double loss, pg_loss, kl_loss, entropy_loss, clipfrac, clipfrac_lower, ppo_kl, entropy_mean;
};

// verl's compute_policy_loss_vanilla + kl_penalty(k3) + agg_loss with the
// global batch info (dp_size 1), on padded matrices, in double.
Reference verl_reference(const Batch& b, const PolicyLossOptions& o, bool with_ref, bool with_ent) {
  const int64_t S = b.S();
  int64_t L = 0;
  for (int64_t s = 0; s < S; ++s) L = std::max<int64_t>(L, b.offsets[size_t(s) + 1] - b.offsets[size_t(s)]);
  auto mat = [&](auto f) {  // (S, L) padded with zeros
    std::vector<std::vector<double>> m(size_t(S), std::vector<double>(size_t(L), 0.0));
    for (int64_t s = 0; s < S; ++s)
      for (int32_t t = b.offsets[size_t(s)]; t < b.offsets[size_t(s) + 1]; ++t)
        m[size_t(s)][size_t(t - b.offsets[size_t(s)])] = f(size_t(t));
    return m;
  };
  const auto mask = mat([&](size_t t) { return double(b.mask[t]); });
  const auto neg_kl = mat([&](size_t t) { return std::clamp(double(b.logp[t]) - b.old[t], -20.0, 20.0); });
  const auto adv = mat([&](size_t t) { return double(b.adv[t]); });
  std::vector<std::vector<double>> pg = mask, clipped = mask, lower = mask, kld = mask;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t j = 0; j < L; ++j) {
      const double A = adv[size_t(s)][size_t(j)], ratio = std::exp(neg_kl[size_t(s)][size_t(j)]);
      const double l1 = -A * ratio;
      const double l2 = -A * std::clamp(ratio, 1 - o.clip_ratio_low, 1 + o.clip_ratio_high);
      const double c1 = std::max(l1, l2);
      const double l3 = -A * o.clip_ratio_c;
      const double c2 = std::min(l3, c1);
      pg[size_t(s)][size_t(j)] = A < 0 ? c2 : c1;
      clipped[size_t(s)][size_t(j)] = l2 > l1;
      lower[size_t(s)][size_t(j)] = (c1 > l3) && (A < 0);
    }
  }
  if (with_ref) {
    kld = mat([&](size_t t) {
      const double k = std::clamp(double(b.ref[t]) - b.logp[t], -20.0, 20.0);
      return std::clamp(std::exp(k) - k - 1, -10.0, 10.0);
    });
  }
  const auto ent = mat([&](size_t t) { return double(b.ent[t]); });
  double N = 0, Sg = 0;
  std::vector<double> n(size_t(S), 0.0);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t j = 0; j < L; ++j) n[size_t(s)] += mask[size_t(s)][size_t(j)];
    N += n[size_t(s)];
    Sg += n[size_t(s)] > 0;
  }
  auto agg = [&](const std::vector<std::vector<double>>& m) {
    double total = 0;
    for (int64_t s = 0; s < S; ++s) {
      double row = 0;
      for (int64_t j = 0; j < L; ++j) row += m[size_t(s)][size_t(j)] * mask[size_t(s)][size_t(j)];
      switch (o.agg) {
        case LossAggMode::token_mean: total += row / N; break;
        case LossAggMode::seq_mean_token_mean:
          if (n[size_t(s)] > 0) total += row / (n[size_t(s)] + 1e-8) / Sg;
          break;
        case LossAggMode::seq_mean_token_sum:
          if (n[size_t(s)] > 0) total += row / Sg;
          break;
      }
    }
    return total;
  };
  auto masked_mean = [&](const std::vector<std::vector<double>>& m) {
    double sum = 0;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t j = 0; j < L; ++j) sum += m[size_t(s)][size_t(j)] * mask[size_t(s)][size_t(j)];
    return sum / N;
  };
  std::vector<std::vector<double>> minus_neg_kl = neg_kl;
  for (auto& row : minus_neg_kl)
    for (double& x : row) x = -x;
  Reference r{};
  r.pg_loss = agg(pg);
  r.kl_loss = with_ref ? agg(kld) : 0;
  r.entropy_loss = with_ent ? agg(ent) : 0;
  r.loss = r.pg_loss - o.entropy_coeff * r.entropy_loss + o.kl_coef * r.kl_loss;
  r.clipfrac = masked_mean(clipped);
  r.clipfrac_lower = masked_mean(lower);
  r.ppo_kl = masked_mean(minus_neg_kl);
  r.entropy_mean = with_ent ? masked_mean(ent) : 0;
  return r;
}

struct Variant {
  LossAggMode agg;
  double kl_coef, entropy_coeff;
  double eps_low = 0.2, eps_high = 0.28;
};

std::string variant_name(const testing::TestParamInfo<Variant>& info) {
  const Variant& v = info.param;
  std::string s = to_string(v.agg);
  std::replace(s.begin(), s.end(), '-', '_');
  if (v.kl_coef > 0) s += "_kl";
  if (v.entropy_coeff != 0) s += "_entropy";
  if (v.eps_low == v.eps_high) s += "_symmetric";
  return s;
}

class PolicyLossVariants : public testing::TestWithParam<Variant> {
 protected:
  PolicyLossOptions options() const {
    PolicyLossOptions o;
    o.agg = GetParam().agg;
    o.kl_coef = GetParam().kl_coef;
    o.entropy_coeff = GetParam().entropy_coeff;
    o.clip_ratio_low = GetParam().eps_low;
    o.clip_ratio_high = GetParam().eps_high;
    return o;
  }
  bool with_ref() const { return GetParam().kl_coef > 0; }
  // Entropies are passed in every variant (the entropy metric); the term
  // is in the loss only when entropy_coeff != 0.
  static constexpr bool kWithEntropy = true;

  PolicyLossMetrics run(const Batch& b, const LossCounts& norm, std::vector<float>& dlp, std::vector<float>& dent) {
    dlp.assign(size_t(b.T()), -7.0f);
    dent.assign(size_t(b.T()), -7.0f);
    return rl::policy_loss(options(), b.inputs(with_ref(), kWithEntropy), norm, dlp, dent);
  }
};

TEST_P(PolicyLossVariants, MatchesVerlFormulas) {
  const Batch b = random_batch(40, 5);
  const LossCounts norm = rl::count_loss_tokens(b.mask, b.offsets);
  ASSERT_GT(norm.tokens, 50);
  std::vector<float> dlp, dent;
  const PolicyLossMetrics m = run(b, norm, dlp, dent);
  const Reference r = verl_reference(b, options(), with_ref(), kWithEntropy);
  const double tol = 1e-7;
  EXPECT_NEAR(m.loss, r.loss, tol * (1 + std::fabs(r.loss)));
  EXPECT_NEAR(m.pg_loss, r.pg_loss, tol * (1 + std::fabs(r.pg_loss)));
  EXPECT_NEAR(m.kl_loss, r.kl_loss, tol * (1 + std::fabs(r.kl_loss)));
  EXPECT_NEAR(m.entropy_loss, r.entropy_loss, tol * (1 + std::fabs(r.entropy_loss)));
  EXPECT_NEAR(m.pg_clipfrac(), r.clipfrac, 1e-12);
  EXPECT_NEAR(m.pg_clipfrac_lower(), r.clipfrac_lower, 1e-12);
  EXPECT_NEAR(m.ppo_kl(), r.ppo_kl, 1e-9);
  EXPECT_NEAR(m.entropy_mean(), r.entropy_mean, 1e-9);
  EXPECT_EQ(m.tokens, double(norm.tokens));
  EXPECT_EQ(m.clipped, m.clipped_high + m.clipped_low);
  // The data exercises every branch.
  EXPECT_GT(m.clipped_high, 0);
  EXPECT_GT(m.clipped_low, 0);
  EXPECT_GT(m.dual_clipped, 0);
  EXPECT_LT(m.clipped, m.tokens);
  // Off-mask gradients are zero.
  for (size_t t = 0; t < dlp.size(); ++t) {
    if (b.mask[t]) continue;
    EXPECT_EQ(dlp[t], 0.0f) << t;
    EXPECT_EQ(dent[t], 0.0f) << t;
  }
}

TEST_P(PolicyLossVariants, GradientsMatchFiniteDifferences) {
  Batch b = random_batch(30, 9);
  const LossCounts norm = rl::count_loss_tokens(b.mask, b.offsets);
  std::vector<float> dlp, dent, scratch_lp, scratch_ent;
  run(b, norm, dlp, dent);
  const PolicyLossOptions o = options();
  auto loss = [&]() { return run(b, norm, scratch_lp, scratch_ent).loss; };
  auto near_kink = [&](size_t t) {
    const double d = double(b.logp[t]) - b.old[t], ratio = std::exp(d), A = b.adv[t];
    const double k = double(b.ref[t]) - b.logp[t];
    bool kink = std::fabs(std::fabs(d) - 20) < 0.05 || std::fabs(ratio - (1 - o.clip_ratio_low)) < 0.02 ||
                std::fabs(ratio - (1 + o.clip_ratio_high)) < 0.02 || (A < 0 && std::fabs(ratio - o.clip_ratio_c) < 0.05);
    if (with_ref()) kink = kink || std::fabs(std::exp(k) - k - 1 - 10) < 0.5 || std::fabs(std::fabs(k) - 20) < 0.05;
    return kink;
  };
  int checked = 0, nonzero = 0;
  for (size_t t = 0; t < b.logp.size(); ++t) {
    if (!b.mask[t] || near_kink(t)) continue;
    const float x = b.logp[t];
    const float xp = x + 1e-3f, xm = x - 1e-3f;
    b.logp[t] = xp;
    const double lp = loss();
    b.logp[t] = xm;
    const double lm = loss();
    b.logp[t] = x;
    const double numeric = (lp - lm) / (double(xp) - double(xm));
    EXPECT_NEAR(dlp[t], numeric, 1e-5 * (1 + std::fabs(numeric)) + 1e-7) << "logprob " << t;
    ++checked;
    nonzero += dlp[t] != 0.0f;
    // The loss is linear in the entropy.
    const float e = b.ent[t];
    b.ent[t] = e + 0.5f;
    const double ep = loss();
    b.ent[t] = e - 0.5f;
    const double em = loss();
    b.ent[t] = e;
    EXPECT_NEAR(dent[t], (ep - em) / 1.0, 1e-9) << "entropy " << t;
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(nonzero, 20);
}

TEST_P(PolicyLossVariants, MicroBatchesAndDpShardsSumToTheWholeMiniBatch) {
  const Batch whole = random_batch(48, 21);
  const LossCounts norm = rl::count_loss_tokens(whole.mask, whole.offsets);
  std::vector<float> want_dlp, want_dent;
  const PolicyLossMetrics want = run(whole, norm, want_dlp, want_dent);

  // 2 "dp ranks" x uneven micro-batches; each piece knows only the global
  // counts, summed from the pieces' own counts (what the all-reduce gives).
  const std::vector<std::pair<int64_t, int64_t>> pieces{{0, 5}, {5, 6}, {6, 20}, {20, 21}, {21, 37}, {37, 48}};
  LossCounts summed;
  for (const auto& [a, c] : pieces) {
    const Batch p = whole.sub(a, c);
    summed += rl::count_loss_tokens(p.mask, p.offsets);
  }
  EXPECT_EQ(summed.tokens, norm.tokens);
  EXPECT_EQ(summed.sequences, norm.sequences);
  PolicyLossMetrics total;
  std::vector<float> got_dlp, got_dent;
  for (const auto& [a, c] : pieces) {
    std::vector<float> dlp, dent;
    total += run(whole.sub(a, c), summed, dlp, dent);
    got_dlp.insert(got_dlp.end(), dlp.begin(), dlp.end());
    got_dent.insert(got_dent.end(), dent.begin(), dent.end());
  }
  EXPECT_EQ(got_dlp, want_dlp);  // per-token gradients are bit-identical
  EXPECT_EQ(got_dent, want_dent);
  EXPECT_NEAR(total.loss, want.loss, 1e-12 * (1 + std::fabs(want.loss)));
  EXPECT_NEAR(total.pg_loss, want.pg_loss, 1e-12 * (1 + std::fabs(want.pg_loss)));
  EXPECT_EQ(total.tokens, want.tokens);
  EXPECT_EQ(total.clipped, want.clipped);
  EXPECT_EQ(total.dual_clipped, want.dual_clipped);

  // Normalising each micro-batch by its own counts (what a naive gradient
  // accumulation does) gives a different gradient.
  std::vector<float> local_dlp;
  for (const auto& [a, c] : pieces) {
    const Batch p = whole.sub(a, c);
    std::vector<float> dlp, dent;
    run(p, rl::count_loss_tokens(p.mask, p.offsets), dlp, dent);
    local_dlp.insert(local_dlp.end(), dlp.begin(), dlp.end());
  }
  EXPECT_NE(local_dlp, want_dlp);
}

INSTANTIATE_TEST_SUITE_P(
    AllModes, PolicyLossVariants,
    testing::Values(Variant{LossAggMode::token_mean, 0.0, 0.0}, Variant{LossAggMode::seq_mean_token_mean, 0.0, 0.0},
                    Variant{LossAggMode::seq_mean_token_sum, 0.0, 0.0},
                    Variant{LossAggMode::token_mean, 0.0, 0.0, 0.2, 0.2},
                    Variant{LossAggMode::token_mean, 0.05, 0.0}, Variant{LossAggMode::token_mean, 0.0, 0.01},
                    Variant{LossAggMode::seq_mean_token_mean, 0.1, -0.02},
                    Variant{LossAggMode::seq_mean_token_sum, 0.02, 0.005}),
    variant_name);

// One token with token-mean over N = 1: the loss is the per-token loss and
// the gradient its derivative.
struct Row {
  const char* what;
  double A, d;          // advantage, logp - logp_old
  double pg, grad;      // expected
  bool clipped, dual;   // expected metric flags
};

TEST(PolicyLoss, KnownValuesTable) {
  const Row rows[] = {
      {"A>0 ratio 1 (tie l1 == l2)", 1, 0, -1, -1, false, false},
      {"A>0 ratio 1.5 clipped at 1+eps_high", 1, std::log(1.5), -1.28, 0, true, false},
      {"A>0 ratio 0.5 not clipped", 1, std::log(0.5), -0.5, -0.5, false, false},
      {"A<0 ratio 0.5 clipped at 1-eps_low", -1, std::log(0.5), 0.8, 0, true, false},
      {"A<0 ratio 1.2 inside", -1, std::log(1.2), 1.2, 1.2, false, false},
      {"A<0 ratio 2 below c", -1, std::log(2.0), 2, 2, false, false},
      {"A<0 ratio 4 dual-clipped at c", -1, std::log(4.0), 3, 0, false, true},
      {"A=-2 ratio 4 dual-clipped", -2, std::log(4.0), 6, 0, false, true},
      {"A>0 log-ratio 25 clamped to 20", 0.5, 25, -0.64, 0, true, false},
      {"A<0 log-ratio -25 clamped to -20", -0.5, -25, 0.4, 0, true, false},
      {"A=0", 0, 0.3, 0, 0, false, false},
  };
  PolicyLossOptions o;  // eps 0.2 / 0.28, c = 3, token-mean
  const std::vector<int32_t> offsets{0, 1};
  const std::vector<uint8_t> mask{1};
  for (const Row& r : rows) {
    SCOPED_TRACE(r.what);
    const std::vector<float> old{-2.0f}, adv{float(r.A)};
    const std::vector<float> lp{float(-2.0 + r.d)};
    rl::PolicyLossInputs in;
    in.logprob = lp;
    in.old_logprob = old;
    in.advantages = adv;
    in.mask = mask;
    in.seq_offsets = offsets;
    std::vector<float> g(1);
    const PolicyLossMetrics m = rl::policy_loss(o, in, {1, 1}, g, {});
    // 1e-6: the log-ratio is rounded to floats on the way in.
    EXPECT_NEAR(m.pg_loss, r.pg, 1e-6);
    EXPECT_NEAR(m.loss, r.pg, 1e-6);
    EXPECT_NEAR(g[0], r.grad, 1e-6);
    EXPECT_NEAR(m.ppo_kl_sum, -std::clamp(r.d, -20.0, 20.0), 1e-6);
    EXPECT_EQ(m.clipped, r.clipped ? 1.0 : 0.0);
    EXPECT_EQ(m.dual_clipped, r.dual ? 1.0 : 0.0);
  }
}

TEST(PolicyLoss, KnownAggregationValues) {
  // seq 0: 3 tokens with A = 1 at ratio 1 (pg -1 each, grad -1);
  // seq 1: 1 token with A = -2 at ratio 1 (pg 2, grad 2);
  // seq 2: masked out entirely (overlong filtered).
  const std::vector<int32_t> offsets{0, 4, 6, 8};
  const std::vector<uint8_t> mask{0, 1, 1, 1, 0, 1, 0, 0};
  const std::vector<float> lp(8, -1.0f), old(8, -1.0f);
  const std::vector<float> adv{0, 1, 1, 1, 0, -2, 5, 5};
  rl::PolicyLossInputs in;
  in.logprob = lp;
  in.old_logprob = old;
  in.advantages = adv;
  in.mask = mask;
  in.seq_offsets = offsets;
  const LossCounts norm = rl::count_loss_tokens(mask, offsets);
  EXPECT_EQ(norm.tokens, 4);
  EXPECT_EQ(norm.sequences, 2);
  struct Case {
    LossAggMode agg;
    double loss, g0, g1;
  };
  const Case cases[] = {{LossAggMode::token_mean, (-3.0 + 2.0) / 4, -1.0 / 4, 2.0 / 4},
                        {LossAggMode::seq_mean_token_mean, (-1.0 + 2.0) / 2, -1.0 / 6, 2.0 / 2},
                        {LossAggMode::seq_mean_token_sum, (-3.0 + 2.0) / 2, -1.0 / 2, 2.0 / 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.agg));
    PolicyLossOptions o;
    o.agg = c.agg;
    std::vector<float> g(8);
    const PolicyLossMetrics m = rl::policy_loss(o, in, norm, g, {});
    EXPECT_NEAR(m.loss, c.loss, 1e-15);
    EXPECT_FLOAT_EQ(g[1], float(c.g0));
    EXPECT_FLOAT_EQ(g[3], float(c.g0));
    EXPECT_FLOAT_EQ(g[5], float(c.g1));
    for (size_t t : {0, 4, 6, 7}) EXPECT_EQ(g[t], 0.0f);
  }
}

TEST(PolicyLoss, KlAndEntropyTermsByHand) {
  // One token, A = 0 (no policy-gradient term), token-mean over N = 2 (the
  // other token lives in another micro-batch).
  const std::vector<int32_t> offsets{0, 1};
  const std::vector<uint8_t> mask{1};
  const std::vector<float> lp{-1.0f}, old{-1.0f}, adv{0.0f}, ent{2.0f};
  struct Case {
    double k, kl, dkl;  // ref - logp, k3 value, dk3/dlogp
  };
  const double l2 = std::log(2.0);
  for (const Case c : {Case{0.0, 0.0, 0.0}, Case{l2, 2 - l2 - 1, -1.0}, Case{-l2, 0.5 + l2 - 1, 0.5},
                       Case{15.0, 10.0, 0.0}}) {
    const std::vector<float> ref{float(-1.0 + c.k)};
    const double k = double(ref[0]) + 1.0;
    const double kl = std::min(std::exp(k) - k - 1, 10.0);
    const double dkl = c.dkl == 0 ? 0 : -(std::exp(k) - 1);
    EXPECT_NEAR(kl, c.kl, 1e-6);
    rl::PolicyLossInputs in;
    in.logprob = lp;
    in.old_logprob = old;
    in.advantages = adv;
    in.mask = mask;
    in.seq_offsets = offsets;
    in.ref_logprob = ref;
    in.entropy = ent;
    PolicyLossOptions o;
    o.kl_coef = 0.1;
    o.entropy_coeff = 0.01;
    std::vector<float> g(1), ge(1);
    const PolicyLossMetrics m = rl::policy_loss(o, in, {2, 1}, g, ge);
    EXPECT_NEAR(m.kl_loss, kl / 2, 1e-12);
    EXPECT_NEAR(m.entropy_loss, 2.0 / 2, 1e-12);
    EXPECT_NEAR(m.loss, (0.1 * kl - 0.01 * 2.0) / 2, 1e-12);
    EXPECT_NEAR(g[0], 0.1 * dkl / 2, 1e-7);
    EXPECT_FLOAT_EQ(ge[0], float(-0.01 / 2));
    EXPECT_EQ(m.entropy_sum, 2.0);
  }
}

TEST(PolicyLoss, MetricsArithmetic) {
  PolicyLossMetrics a, b;
  a.loss = 1;
  a.tokens = 4;
  a.clipped = 1;
  a.entropy_sum = 2;
  b.loss = 2;
  b.tokens = 6;
  b.clipped = 4;
  b.dual_clipped = 2;
  b.ppo_kl_sum = -1;
  a += b;
  EXPECT_EQ(a.loss, 3);
  EXPECT_EQ(a.tokens, 10);
  EXPECT_DOUBLE_EQ(a.pg_clipfrac(), 0.5);
  EXPECT_DOUBLE_EQ(a.pg_clipfrac_lower(), 0.2);
  EXPECT_DOUBLE_EQ(a.ppo_kl(), -0.1);
  EXPECT_DOUBLE_EQ(a.entropy_mean(), 0.2);
  const auto back = PolicyLossMetrics::from_array(a.to_array());
  EXPECT_EQ(back.to_array(), a.to_array());
  EXPECT_EQ(PolicyLossMetrics{}.pg_clipfrac(), 0.0);
}

// The paper's Figure 3 metric: the old policy's probability of the tokens
// clipped at 1 + eps_high (A > 0), their mean and maximum; other tokens,
// clipped below or not at all, do not count.
TEST(PolicyLoss, UpClippedTokensOldProbability) {
  Batch b;
  // ratio e^0.5 > 1.28, A > 0: up-clipped (p_old 0.1 and 0.3); ratio 1: not;
  // ratio e^-1 < 0.8, A < 0: clipped below.
  b.logp = {std::log(0.1f) + 0.5f, std::log(0.3f) + 0.5f, std::log(0.5f), std::log(0.6f) - 1.0f};
  b.old = {std::log(0.1f), std::log(0.3f), std::log(0.5f), std::log(0.6f)};
  b.adv = {1, 1, 1, -1};
  b.mask = {1, 1, 1, 1};
  b.offsets = {0, 4};
  std::vector<float> dlp(4), dent;
  PolicyLossOptions o;
  const PolicyLossMetrics m = rl::policy_loss(o, b.inputs(false, false), LossCounts{4, 1}, dlp, dent);
  EXPECT_EQ(m.clipped_high, 2);
  EXPECT_EQ(m.clipped_low, 1);
  EXPECT_NEAR(m.clipped_high_prob_mean(), 0.2, 1e-6);
  EXPECT_NEAR(m.clipped_high_prob_max, 0.3, 1e-6);
  // Summed over micro-batches the mean is over all their up-clipped tokens,
  // the maximum the largest.
  PolicyLossMetrics other;
  other.clipped_high = 1;
  other.clipped_high_prob_sum = 0.5;
  other.clipped_high_prob_max = 0.5;
  PolicyLossMetrics sum = m;
  sum += other;
  EXPECT_NEAR(sum.clipped_high_prob_mean(), 0.3, 1e-6);
  EXPECT_NEAR(sum.clipped_high_prob_max, 0.5, 1e-6);
  EXPECT_EQ(PolicyLossMetrics{}.clipped_high_prob_mean(), 0.0);
}

TEST(PolicyLoss, OptionsFromConfig) {
  AlgorithmConfig a;
  a.clip_ratio_low = 0.1;
  a.clip_ratio_high = 0.3;
  a.clip_ratio_c = 5;
  a.loss_agg_mode = LossAggMode::seq_mean_token_sum;
  a.kl_coef = 0.2;
  a.entropy_coeff = 0.03;
  const PolicyLossOptions o = rl::policy_loss_options(a);
  EXPECT_EQ(o.clip_ratio_low, 0.1);
  EXPECT_EQ(o.clip_ratio_high, 0.3);
  EXPECT_EQ(o.clip_ratio_c, 5);
  EXPECT_EQ(o.agg, LossAggMode::seq_mean_token_sum);
  EXPECT_EQ(o.kl_coef, 0.2);
  EXPECT_EQ(o.entropy_coeff, 0.03);
}

TEST(PolicyLossDeathTest, Misuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Batch b = random_batch(4, 3);
  const LossCounts norm = rl::count_loss_tokens(b.mask, b.offsets);
  std::vector<float> g(size_t(b.T())), ge(size_t(b.T())), short_g(1);
  PolicyLossOptions o;
  EXPECT_DEATH(rl::policy_loss(o, b.inputs(false, false), norm, short_g, {}), "dlogprob 1");
  o.kl_coef = 0.1;
  EXPECT_DEATH(rl::policy_loss(o, b.inputs(false, false), norm, g, {}), "without reference log-probs");
  o.kl_coef = 0;
  o.entropy_coeff = 0.1;
  EXPECT_DEATH(rl::policy_loss(o, b.inputs(false, false), norm, g, ge), "without entropies");
  EXPECT_DEATH(rl::policy_loss(o, b.inputs(false, true), norm, g, {}), "dentropy 0 for T");
  o.entropy_coeff = 0;
  o.clip_ratio_c = 1;
  EXPECT_DEATH(rl::policy_loss(o, b.inputs(false, false), norm, g, {}), "clip_ratio_c 1 must be > 1");
  o.clip_ratio_c = 3;
  EXPECT_DEATH(rl::policy_loss(o, b.inputs(false, false), {norm.tokens - 1, norm.sequences}, g, {}),
               "normaliser .* is smaller than this micro-batch");
  Batch bad = b;
  bad.mask[0] = 2;
  EXPECT_DEATH(rl::policy_loss(o, bad.inputs(false, false), norm, g, {}), "mask value 2 at 0");
  bad = b;
  bad.offsets.back() -= 1;
  EXPECT_DEATH(rl::policy_loss(o, bad.inputs(false, false), norm, g, {}), "seq_offsets must run from 0 to T");
  bad = b;
  bad.ref.pop_back();
  EXPECT_DEATH(rl::policy_loss(o, bad.inputs(true, false), norm, g, {}), "ref_logprob .* for T");
}

}  // namespace
}  // namespace dapo
