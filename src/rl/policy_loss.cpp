// The DAPO clipped policy-gradient loss with its autograd-exact gradient
// (policy_loss.h).
#include "dapo/rl/policy_loss.h"

#include <algorithm>
#include <cmath>

#include "dapo/core/error.h"

namespace dapo::rl {
namespace {

// verl clamps log-ratios to +-20 before exp and the k3 estimate to +-10.
constexpr double kLogRatioBound = 20.0;
constexpr double kKlBound = 10.0;

struct Clamped {
  double value;
  bool inside;  // torch.clamp passes the gradient iff lo <= x <= hi
};
Clamped clamp_with_grad(double x, double lo, double hi) {
  return {std::clamp(x, lo, hi), x >= lo && x <= hi};
}

// torch.maximum / torch.minimum: value, and the gradient of the result
// given the branches' gradients (half each on a tie).
struct ValueGrad {
  double v, g;
};
ValueGrad pick_max(ValueGrad a, ValueGrad b) {
  if (a.v > b.v) return a;
  if (b.v > a.v) return b;
  return {a.v, 0.5 * (a.g + b.g)};
}
ValueGrad pick_min(ValueGrad a, ValueGrad b) {
  if (a.v < b.v) return a;
  if (b.v < a.v) return b;
  return {a.v, 0.5 * (a.g + b.g)};
}

void check_offsets(std::span<const int32_t> seq_offsets, size_t T) {
  DAPO_CHECK(!seq_offsets.empty() && seq_offsets.front() == 0 && size_t(seq_offsets.back()) == T,
             "seq_offsets must run from 0 to T = ", T);
  for (size_t s = 1; s < seq_offsets.size(); ++s)
    DAPO_CHECK(seq_offsets[s] >= seq_offsets[s - 1], "seq_offsets decrease at ", s);
}

}  // namespace

PolicyLossOptions policy_loss_options(const AlgorithmConfig& a) {
  PolicyLossOptions o;
  o.clip_ratio_low = a.clip_ratio_low;
  o.clip_ratio_high = a.clip_ratio_high;
  o.clip_ratio_c = a.clip_ratio_c;
  o.agg = a.loss_agg_mode;
  o.kl_coef = a.kl_coef;
  o.entropy_coeff = a.entropy_coeff;
  return o;
}

LossCounts count_loss_tokens(std::span<const uint8_t> mask, std::span<const int32_t> seq_offsets) {
  check_offsets(seq_offsets, mask.size());
  LossCounts c;
  for (size_t s = 0; s + 1 < seq_offsets.size(); ++s) {
    int64_t n = 0;
    for (int32_t t = seq_offsets[s]; t < seq_offsets[s + 1]; ++t) {
      DAPO_CHECK(mask[size_t(t)] <= 1, "mask value ", int(mask[size_t(t)]), " at ", t);
      n += mask[size_t(t)];
    }
    c.tokens += n;
    c.sequences += n > 0;
  }
  return c;
}

std::array<double, PolicyLossMetrics::kFields> PolicyLossMetrics::to_array() const {
  return {loss,         pg_loss,    kl_loss,      entropy_loss, tokens, clipped, clipped_high, clipped_low,
          dual_clipped, ppo_kl_sum, entropy_sum, clipped_high_prob_sum};
}

PolicyLossMetrics PolicyLossMetrics::from_array(const std::array<double, kFields>& a) {
  PolicyLossMetrics m;
  m.loss = a[0];
  m.pg_loss = a[1];
  m.kl_loss = a[2];
  m.entropy_loss = a[3];
  m.tokens = a[4];
  m.clipped = a[5];
  m.clipped_high = a[6];
  m.clipped_low = a[7];
  m.dual_clipped = a[8];
  m.ppo_kl_sum = a[9];
  m.entropy_sum = a[10];
  m.clipped_high_prob_sum = a[11];
  return m;
}

PolicyLossMetrics& PolicyLossMetrics::operator+=(const PolicyLossMetrics& o) {
  const auto a = to_array(), b = o.to_array();
  std::array<double, kFields> s;
  for (size_t i = 0; i < kFields; ++i) s[i] = a[i] + b[i];
  const double hi = std::max(clipped_high_prob_max, o.clipped_high_prob_max);
  *this = from_array(s);
  clipped_high_prob_max = hi;
  return *this;
}

PolicyLossMetrics policy_loss(const PolicyLossOptions& opt, const PolicyLossInputs& in, const LossCounts& normaliser,
                              std::span<float> dlogprob, std::span<float> dentropy) {
  const size_t T = in.logprob.size();
  DAPO_CHECK(in.old_logprob.size() == T && in.advantages.size() == T && in.mask.size() == T &&
                 dlogprob.size() == T,
             "policy_loss: logprob ", T, ", old_logprob ", in.old_logprob.size(), ", advantages ",
             in.advantages.size(), ", mask ", in.mask.size(), ", dlogprob ", dlogprob.size());
  const bool has_ref = !in.ref_logprob.empty(), has_entropy = !in.entropy.empty();
  DAPO_CHECK(!has_ref || in.ref_logprob.size() == T, "policy_loss: ref_logprob ", in.ref_logprob.size(), " for T ", T);
  DAPO_CHECK(!has_entropy || in.entropy.size() == T, "policy_loss: entropy ", in.entropy.size(), " for T ", T);
  DAPO_CHECK(opt.kl_coef == 0 || has_ref, "policy_loss: kl_coef ", opt.kl_coef, " without reference log-probs");
  DAPO_CHECK(opt.entropy_coeff == 0 || has_entropy, "policy_loss: entropy_coeff ", opt.entropy_coeff,
             " without entropies");
  DAPO_CHECK(dentropy.empty() ? opt.entropy_coeff == 0 : dentropy.size() == T, "policy_loss: dentropy ",
             dentropy.size(), " for T ", T, " with entropy_coeff ", opt.entropy_coeff);
  DAPO_CHECK(opt.clip_ratio_c > 1, "policy_loss: clip_ratio_c ", opt.clip_ratio_c, " must be > 1");
  const LossCounts local = count_loss_tokens(in.mask, in.seq_offsets);
  DAPO_CHECK(normaliser.tokens >= local.tokens && normaliser.sequences >= local.sequences,
             "policy_loss: the mini-batch normaliser (", normaliser.tokens, " tokens, ", normaliser.sequences,
             " sequences) is smaller than this micro-batch (", local.tokens, ", ", local.sequences, ")");

  const double lo = 1.0 - opt.clip_ratio_low, hi = 1.0 + opt.clip_ratio_high;
  PolicyLossMetrics m;
  for (size_t s = 0; s + 1 < in.seq_offsets.size(); ++s) {
    const size_t b = size_t(in.seq_offsets[s]), e = size_t(in.seq_offsets[s + 1]);
    int64_t n_s = 0;
    for (size_t t = b; t < e; ++t) n_s += in.mask[t];
    double w = 0;
    if (n_s > 0) {
      switch (opt.agg) {
        case LossAggMode::token_mean: w = 1.0 / double(normaliser.tokens); break;
        case LossAggMode::seq_mean_token_mean: w = 1.0 / (double(normaliser.sequences) * double(n_s)); break;
        case LossAggMode::seq_mean_token_sum: w = 1.0 / double(normaliser.sequences); break;
      }
    }
    for (size_t t = b; t < e; ++t) {
      if (!in.mask[t]) {
        dlogprob[t] = 0.0f;
        if (!dentropy.empty()) dentropy[t] = 0.0f;
        continue;
      }
      const double lp = in.logprob[t], A = in.advantages[t];
      // Policy-gradient term; gradients are d/d(logp).
      const Clamped d = clamp_with_grad(lp - double(in.old_logprob[t]), -kLogRatioBound, kLogRatioBound);
      const double ratio = std::exp(d.value);
      const double dratio = d.inside ? ratio : 0.0;  // d ratio / d logp
      const Clamped rc = clamp_with_grad(ratio, lo, hi);
      const ValueGrad l1{-A * ratio, -A * dratio};
      const ValueGrad l2{-A * rc.value, rc.inside ? -A * dratio : 0.0};
      const ValueGrad clip1 = pick_max(l1, l2);
      ValueGrad pg = clip1;
      bool dual = false;
      if (A < 0) {
        const ValueGrad l3{-A * opt.clip_ratio_c, 0.0};
        pg = pick_min(l3, clip1);
        dual = clip1.v > l3.v;
      }
      double loss = pg.v, grad = pg.g;
      // k3 KL to the reference.
      if (has_ref) {
        const Clamped k = clamp_with_grad(double(in.ref_logprob[t]) - lp, -kLogRatioBound, kLogRatioBound);
        const double ek = std::exp(k.value);
        const Clamped kl = clamp_with_grad(ek - k.value - 1.0, -kKlBound, kKlBound);
        const double dkl = (k.inside && kl.inside) ? -(ek - 1.0) : 0.0;
        loss += opt.kl_coef * kl.value;
        grad += opt.kl_coef * dkl;
        m.kl_loss += w * kl.value;
      }
      if (has_entropy) {
        const double h = in.entropy[t];
        loss -= opt.entropy_coeff * h;
        m.entropy_loss += w * h;
        m.entropy_sum += h;
      }
      dlogprob[t] = float(w * grad);
      if (!dentropy.empty()) dentropy[t] = float(-opt.entropy_coeff * w);
      m.loss += w * loss;
      m.pg_loss += w * pg.v;
      m.tokens += 1;
      const bool clipped = l2.v > l1.v;
      m.clipped += clipped;
      m.clipped_high += clipped && A > 0;
      if (clipped && A > 0) {
        // The paper's Figure 3: clip-higher matters because the tokens it
        // frees are unlikely ones under the old policy.
        const double p_old = std::exp(double(in.old_logprob[t]));
        m.clipped_high_prob_sum += p_old;
        m.clipped_high_prob_max = std::max(m.clipped_high_prob_max, p_old);
      }
      m.clipped_low += clipped && A < 0;
      m.dual_clipped += dual;
      m.ppo_kl_sum += -d.value;
    }
  }
  return m;
}

}  // namespace dapo::rl
