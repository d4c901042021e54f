// The DAPO policy loss of one micro-batch (docs/DESIGN.md section 2, phase 8),
// with verl's formulas (core_algos.compute_policy_loss_vanilla, agg_loss,
// kl_penalty "low_var_kl"/k3) and the gradient the model's backward needs.
//
// Per response token t (mask[t] = 1), with A the advantage:
//   d      = clamp(logp - logp_old, -20, 20),  ratio = exp(d)
//   l1     = -A * ratio,  l2 = -A * clamp(ratio, 1 - eps_low, 1 + eps_high)
//   clip1  = max(l1, l2)                        (clip-higher when eps_high > eps_low)
//   pg     = A < 0 ? min(clip1, -A * c) : clip1 (dual clip, c = clip_ratio_c)
//   kl     = clamp(exp(k) - k - 1, -10, 10), k = clamp(ref - logp, -20, 20)   (k3)
//   l_t    = pg + kl_coef * kl - entropy_coeff * entropy
// and the loss is sum_t w_t * l_t with the aggregation weights
//   token-mean           w_t = 1 / N
//   seq-mean-token-mean  w_t = 1 / (S * n_s)   (n_s: mask tokens of t's sequence)
//   seq-mean-token-sum   w_t = 1 / S
// where N and S are the counts of the whole MINI-BATCH across ALL dp ranks
// and micro-batches: N = mask tokens, S = sequences with at least one mask
// token. (Fully masked sequences - overlong-filtered ones - are left out of
// S as verl's agg_loss does by default; verl's newer engine path passes
// S = ppo_mini_batch_size * n instead. The two differ only with overlong
// filtering and a seq-mean mode; a caller wanting the latter passes that
// count as normaliser.sequences.)
// The caller sums count_loss_tokens over its micro-batches and all-reduces
// (SUM) over dp before the first micro-batch. Then the sum of this
// function's losses (and gradients) over all micro-batches and ranks is
// exactly the loss (gradient) of the whole mini-batch computed at once: the
// key property that makes gradient accumulation and data parallelism
// invisible. Gradients must therefore be SUMMED over dp (optim/).
// (verl reaches the same by multiplying by dp_size and averaging.)
//
// Gradients are those of PyTorch autograd on the formulas above: clamp
// passes the gradient inside [lo, hi] (bounds included) and blocks it
// outside; max/min send it to the larger/smaller branch and split it in
// half on a tie; where() sends it to the chosen branch only.
//
// Layout: one packed micro-batch of T positions and S sequences,
// seq_offsets (S+1) as the model's cu_seqlens. A sequence must lie whole in
// one micro-batch (seq-mean-token-mean needs its n_s). All per-token arrays
// are (T), aligned with the model's log-probs (response_tokens.h); values
// at positions with mask 0 are ignored (they may be anything finite or not).
// Host code, computed in double; on GPUs the (T) vectors cross PCIe, which
// is small next to the forward and backward.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "dapo/core/config.h"

namespace dapo::rl {

struct PolicyLossOptions {
  double clip_ratio_low = 0.2;    // eps_low
  double clip_ratio_high = 0.28;  // eps_high
  double clip_ratio_c = 3.0;      // dual-clip bound, > 1
  LossAggMode agg = LossAggMode::token_mean;
  double kl_coef = 0.0;           // > 0 needs ref_logprob
  double entropy_coeff = 0.0;     // != 0 needs entropy
};
PolicyLossOptions policy_loss_options(const AlgorithmConfig& algorithm);

// Counts of one micro-batch; summed over micro-batches and dp ranks they are
// the normaliser of the mini-batch.
struct LossCounts {
  int64_t tokens = 0;     // mask tokens
  int64_t sequences = 0;  // sequences with at least one mask token
  LossCounts& operator+=(const LossCounts& o) {
    tokens += o.tokens;
    sequences += o.sequences;
    return *this;
  }
};
// mask (T) of 0/1, seq_offsets (S+1).
LossCounts count_loss_tokens(std::span<const uint8_t> mask, std::span<const int32_t> seq_offsets);

struct PolicyLossInputs {
  std::span<const float> logprob;      // (T) log pi_theta(token), current weights
  std::span<const float> old_logprob;  // (T) log pi_old (recomputed before the update)
  std::span<const float> advantages;   // (T) the response's advantage on each of its tokens
  std::span<const uint8_t> mask;       // (T) 1: a response token in the loss
  std::span<const int32_t> seq_offsets;  // (S+1), 0 .. T, non-decreasing
  std::span<const float> ref_logprob;  // (T) frozen reference; empty when kl_coef == 0
  std::span<const float> entropy;      // (T) per-token entropy; empty: no entropy term or metric
};

// Sums over tokens (and already-normalised loss terms): add them over
// micro-batches and all-reduce over dp (SUM) for the mini-batch's metrics.
struct PolicyLossMetrics {
  double loss = 0;          // sum_t w_t * l_t: what the gradient is of
  double pg_loss = 0;       // sum_t w_t * pg_t            -> actor/pg_loss
  double kl_loss = 0;       // sum_t w_t * kl_t            -> actor/kl_loss
  double entropy_loss = 0;  // sum_t w_t * entropy_t       -> actor/entropy_loss
  double tokens = 0;        // mask tokens (denominator of the fractions below)
  double clipped = 0;       // l2 > l1: either clip bound active -> actor/pg_clipfrac (verl's definition)
  double clipped_high = 0;  // ... of which A > 0 and ratio > 1 + eps_high (the clip-higher bound)
  double clipped_low = 0;   // ... of which A < 0 and ratio < 1 - eps_low (the lower bound)
  double dual_clipped = 0;  // A < 0 and clip1 > -A*c -> actor/pg_clipfrac_lower
  double ppo_kl_sum = 0;    // sum_t (logp_old - logp), clamped as d -> actor/ppo_kl
  double entropy_sum = 0;   // sum_t entropy_t (when given) -> actor/entropy
  // exp(logp_old) of the clipped_high tokens: their sum and their maximum
  // -> actor/clipped_high_prob_mean and _max (the paper's Figure 3).
  double clipped_high_prob_sum = 0;
  double clipped_high_prob_max = 0;  // a maximum: not in to_array (reduce it with MAX)

  // The summable fields.
  static constexpr size_t kFields = 12;
  std::array<double, kFields> to_array() const;
  static PolicyLossMetrics from_array(const std::array<double, kFields>& a);
  PolicyLossMetrics& operator+=(const PolicyLossMetrics& o);

  // Fractions / means over mask tokens (0 when there are none).
  double pg_clipfrac() const { return tokens > 0 ? clipped / tokens : 0; }
  double pg_clipfrac_high() const { return tokens > 0 ? clipped_high / tokens : 0; }
  double pg_clipfrac_low() const { return tokens > 0 ? clipped_low / tokens : 0; }
  double pg_clipfrac_lower() const { return tokens > 0 ? dual_clipped / tokens : 0; }
  double ppo_kl() const { return tokens > 0 ? ppo_kl_sum / tokens : 0; }
  double entropy_mean() const { return tokens > 0 ? entropy_sum / tokens : 0; }
  double clipped_high_prob_mean() const { return clipped_high > 0 ? clipped_high_prob_sum / clipped_high : 0; }
};

// Computes the micro-batch's share of the mini-batch loss and its gradient.
// dlogprob: (T) f32, OVERWRITTEN with dloss/dlogprob (0 off the mask).
// dentropy: (T) f32, OVERWRITTEN with dloss/dentropy (= -entropy_coeff * w_t
//   on the mask, 0 elsewhere); may be empty when entropy_coeff == 0.
// normaliser: the mini-batch's global counts (see above); it must cover at
//   least this micro-batch's own counts.
// Size mismatches, a missing ref_logprob/entropy, a mask value other than
// 0/1 and an impossible normaliser are bugs (DAPO_CHECK).
PolicyLossMetrics policy_loss(const PolicyLossOptions& options, const PolicyLossInputs& in,
                              const LossCounts& normaliser, std::span<float> dlogprob, std::span<float> dentropy);

}  // namespace dapo::rl
