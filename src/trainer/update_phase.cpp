// Advantages -> packed mini-batches -> old/ref log-probs -> AdamW steps.
#include "dapo/trainer/update_phase.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "dapo/core/error.h"
#include "dapo/rl/advantages.h"
#include "dapo/rl/response_tokens.h"
#include "dapo/trainer/timing.h"

namespace dapo::trainer {
namespace {

// Channels of the packed sequences.
enum Channel : int { kAdvantage = 0, kOldLogprob = 1, kRefLogprob = 2, kChannels = 3 };


// Where packed sequence i of a mini-batch came from.
struct SequenceSource {
  int64_t group = 0;
  int64_t response = 0;
};

struct MiniBatch {
  std::vector<MicroBatch> micro;
  std::vector<SequenceSource> source;  // by SequenceSet index
};

MiniBatch pack_mini_batch(const std::vector<rl::GroupData>& groups, std::span<const int64_t> mini_batch, int64_t m,
                          int64_t max_tokens) {
  MiniBatch mb;
  SequenceSet set(kChannels);
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<float> adv, zeros;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (mini_batch[gi] != m) continue;
    const rl::GroupData& g = groups[gi];
    const int64_t P = int64_t(g.prompt_ids.size());
    for (int64_t k = 0; k < g.num_responses(); ++k) {
      const int64_t R = g.response_length(k), L = P + R;
      tokens.assign(g.prompt_ids.begin(), g.prompt_ids.end());
      const std::span<const int32_t> resp = g.response(k);
      tokens.insert(tokens.end(), resp.begin(), resp.end());
      mask.assign(size_t(L), 0);
      adv.assign(size_t(L), 0.0f);
      zeros.assign(size_t(L), 0.0f);
      rl::fill_response_mask(P, R, g.in_loss[size_t(k)] != 0, mask);
      rl::fill_response_values(P, R, float(g.advantage[size_t(k)]), adv);
      set.add(tokens, mask, {adv, zeros, zeros});
      mb.source.push_back({int64_t(gi), k});
    }
  }
  mb.micro = pack_micro_batches(set, max_tokens);
  return mb;
}

// Scores every micro-batch of `mb` with `runner` into channel `channel`.
void score_into(UpdateRunner& runner, float inv_temperature, MiniBatch& mb, int channel) {
  std::vector<std::vector<float>> logprob, entropy;
  runner.score(mb.micro, inv_temperature, logprob, entropy);
  for (size_t j = 0; j < mb.micro.size(); ++j) mb.micro[j].values[size_t(channel)] = std::move(logprob[j]);
}


// The response positions of micro's packed sequences: f(group, index of the
// token in its group's responses, index in the micro-batch). Groups is
// std::vector<rl::GroupData>, const or not.
template <class Groups, class F>
void for_each_response_token(const MiniBatch& mb, const MicroBatch& micro, Groups& groups, F f) {
  for (int64_t b = 0; b < micro.num_sequences(); ++b) {
    const SequenceSource& src = mb.source[size_t(micro.sequences[size_t(b)])];
    auto& g = groups[size_t(src.group)];
    const int64_t P = int64_t(g.prompt_ids.size()), R = g.response_length(src.response);
    const rl::TokenRange range = rl::response_positions(P, R);
    const int64_t base = micro.cu_seqlens[size_t(b)];
    const int64_t at = g.response_offsets[size_t(src.response)];
    for (int64_t j = 0; j < R; ++j) f(g, size_t(at + j), size_t(base + range.begin + j));
  }
}

// Copies the old log-probs of the response tokens back into their groups
// (the rollout dump records them).
void store_old_logprobs(const MiniBatch& mb, std::vector<rl::GroupData>& groups) {
  for (const MicroBatch& micro : mb.micro)
    for_each_response_token(mb, micro, groups, [&](rl::GroupData& g, size_t t, size_t i) {
      g.old_logprobs[t] = micro.values[kOldLogprob][i];
    });
}

// rollout.exact_logprobs: the engine's log-probs are the old log-probs.
void load_sampling_logprobs(MiniBatch& mb, const std::vector<rl::GroupData>& groups) {
  for (MicroBatch& micro : mb.micro) {
    std::vector<float>& old = micro.values[kOldLogprob];
    for_each_response_token(mb, micro, groups, [&](const rl::GroupData& g, size_t t, size_t i) {
      DAPO_CHECK(g.sampling_logprobs.size() == g.response_ids.size(), "exact log-probs: a group of ",
                 g.response_ids.size(), " response tokens has ", g.sampling_logprobs.size(), " engine log-probs");
      old[i] = g.sampling_logprobs[t];
    });
  }
}

void add_mismatch(UpdatePhaseResult::RolloutCorrection& rc, double trainer, double sampler) {
  const double d = trainer - sampler;  // log(p / q)
  rc.tokens += 1;
  rc.k3_sum += std::expm1(d) - d;
  rc.abs_diff_sum += std::fabs(d);
  rc.abs_diff_max = std::max(rc.abs_diff_max, std::fabs(d));
}

}  // namespace

UpdatePhaseContext update_phase_context(const Config& config, UpdateRunner& actor, UpdateRunner* reference) {
  UpdatePhaseContext c;
  c.actor = &actor;
  c.reference = reference;
  c.loss = rl::policy_loss_options(config.algorithm);
  c.norm_adv_by_std = config.algorithm.norm_adv_by_std;
  c.inv_temperature = float(1.0 / config.rollout.temperature);
  c.ppo_epochs = config.train.ppo_epochs;
  c.max_token_len = config.train.max_token_len_per_gpu;
  c.old_from_sampler = config.rollout.exact_logprobs;
  return c;
}

UpdatePhaseResult run_update_phase(const UpdatePhaseContext& ctx, const parallel::Grid& grid,
                                   std::vector<rl::GroupData>& groups, std::span<const int64_t> mini_batch,
                                   int64_t num_mini_batches, double lr) {
  DAPO_CHECK(ctx.actor != nullptr, "run_update_phase without an actor");
  DAPO_CHECK(mini_batch.size() == groups.size(), "run_update_phase: ", mini_batch.size(), " mini-batch indices for ",
             groups.size(), " groups");
  const bool kl = ctx.loss.kl_coef > 0;
  DAPO_CHECK(!kl || ctx.reference != nullptr, "kl_coef > 0 needs a reference model");
  UpdatePhaseResult res;
  res.lr = lr;

  // Advantages (phase 6), per group.
  for (rl::GroupData& g : groups) {
    g.advantage.assign(size_t(g.num_responses()), 0.0);
    rl::grpo_group_advantages(g.reward, ctx.norm_adv_by_std, g.advantage);
    g.old_logprobs.assign(g.response_ids.size(), 0.0f);
  }

  // Old and reference log-probs (phase 7), before any weight changes.
  std::vector<MiniBatch> mbs(static_cast<size_t>(num_mini_batches));
  auto t0 = Clock::now();
  for (int64_t m = 0; m < num_mini_batches; ++m) {
    mbs[size_t(m)] = pack_mini_batch(groups, mini_batch, m, ctx.max_token_len);
    if (ctx.old_from_sampler)
      load_sampling_logprobs(mbs[size_t(m)], groups);
    else
      score_into(*ctx.actor, ctx.inv_temperature, mbs[size_t(m)], kOldLogprob);
    store_old_logprobs(mbs[size_t(m)], groups);
  }
  res.old_logprob_s = seconds_since(t0);
  if (!ctx.old_from_sampler)
    for (const rl::GroupData& g : groups) {
      if (g.sampling_logprobs.size() != g.old_logprobs.size()) continue;
      for (size_t t = 0; t < g.old_logprobs.size(); ++t)
        add_mismatch(res.rollout_corr, g.old_logprobs[t], g.sampling_logprobs[t]);
    }
  if (kl) {
    t0 = Clock::now();
    for (MiniBatch& mb : mbs) score_into(*ctx.reference, ctx.inv_temperature, mb, kRefLogprob);
    res.ref_s = seconds_since(t0);
  }

  // The update (phase 8).
  t0 = Clock::now();
  UpdateOptions options;
  options.inv_temperature = ctx.inv_temperature;
  options.entropy_gradient = ctx.loss.entropy_coeff != 0;
  double grad_norm_sum = 0;
  rl::PolicyLossMetrics local;
  for (int64_t epoch = 0; epoch < ctx.ppo_epochs; ++epoch) {
    for (size_t m = 0; m < mbs.size(); ++m) {
      MiniBatch& mb = mbs[m];
      // Without an old-log-prob pass the mismatch is measured where the
      // trainer's forward meets the engine's log-probs with the weights
      // before the update: the first mini-batch of the first epoch.
      const bool measure = ctx.old_from_sampler && epoch == 0 && m == 0;
      rl::LossCounts counts;
      for (const MicroBatch& micro : mb.micro) counts += rl::count_loss_tokens(micro.mask, micro.cu_seqlens);
      std::vector<int64_t> c{counts.tokens, counts.sequences};
      grid.dp.all_reduce_i64(c, parallel::ReduceOp::sum);
      const rl::LossCounts normaliser{c[0], c[1]};
      const TokenGradient gradient = [&](const MicroBatch& micro, const ForwardOutputs& out,
                                         std::span<float> dlogprob, std::span<float> dentropy) {
        if (measure)
          for_each_response_token(mb, micro, groups, [&](const rl::GroupData& g, size_t t, size_t i) {
            add_mismatch(res.rollout_corr, out.logprob[i], g.sampling_logprobs[t]);
          });
        if (normaliser.tokens == 0) return;  // nothing in the loss anywhere: zero gradient
        rl::PolicyLossInputs in;
        in.logprob = out.logprob;
        in.old_logprob = micro.values[kOldLogprob];
        in.advantages = micro.values[kAdvantage];
        in.mask = micro.mask;
        in.seq_offsets = micro.cu_seqlens;
        if (kl) in.ref_logprob = micro.values[kRefLogprob];
        in.entropy = out.entropy;
        local += rl::policy_loss(ctx.loss, in, normaliser, dlogprob, dentropy);
      };
      const optim::StepReport report = ctx.actor->step(mb.micro, gradient, lr, options);
      ++res.optimizer_steps;
      if (report.skipped) {
        ++res.skipped_steps;
      } else {
        grad_norm_sum += report.grad_norm;
      }
    }
  }
  res.update_s = seconds_since(t0);
  // Every tp rank of a dp group computed the same sums: reduce over dp only.
  std::array<double, rl::PolicyLossMetrics::kFields> a = local.to_array();
  grid.dp.all_reduce_f64(a, parallel::ReduceOp::sum);
  res.loss = rl::PolicyLossMetrics::from_array(a);
  res.loss.clipped_high_prob_max = grid.dp.all_reduce_f64(local.clipped_high_prob_max, parallel::ReduceOp::max);
  const int64_t taken = res.optimizer_steps - res.skipped_steps;
  res.grad_norm_mean = taken > 0 ? grad_norm_sum / double(taken) : 0.0;
  return res;
}

}  // namespace dapo::trainer
