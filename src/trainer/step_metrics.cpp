// dapo_step_metrics: per-rank sums -> dp/world reductions -> named metrics.
#include "dapo/trainer/step_metrics.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

#include "dapo/rollout/rollout_batch.h"

namespace dapo::trainer {
namespace {

// Sums over this rank's training groups, then over dp.
enum Sum : size_t { kResponses, kScore, kReward, kAdv, kAcc, kRespLen, kPromptLen, kClipped, kTokens, kSums };
// Maxima (minima are taken as maxima of the negated values).
enum Ext : size_t { kScoreX, kRewardX, kAdvX, kRespLenX, kPromptLenX, kCorrDiffX, kExts };

}  // namespace

Metrics dapo_step_metrics(const Config& config, const parallel::Grid& grid, const GenerationResult& gen,
                          const UpdatePhaseResult& update, double step_seconds) {
  const double lowest = -std::numeric_limits<double>::infinity();
  std::vector<double> sum(kSums, 0.0), hi(kExts, lowest), lo(kExts, lowest);  // lo holds -min
  auto extreme = [&](Ext e, double v) {
    hi[e] = std::max(hi[e], v);
    lo[e] = std::max(lo[e], -v);
  };
  for (const rl::GroupData& g : gen.groups) {
    const double P = double(g.prompt_ids.size());
    for (int64_t k = 0; k < g.num_responses(); ++k) {
      const double R = double(g.response_length(k));
      sum[kResponses] += 1;
      sum[kScore] += g.score[size_t(k)];
      sum[kReward] += g.reward[size_t(k)];
      sum[kAdv] += g.advantage[size_t(k)];
      sum[kAcc] += g.acc[size_t(k)];
      sum[kRespLen] += R;
      sum[kPromptLen] += P;
      sum[kClipped] += g.finish_reason[size_t(k)] == uint8_t(rollout::FinishReason::length) ? 1 : 0;
      sum[kTokens] += P + R;
      extreme(kScoreX, g.score[size_t(k)]);
      extreme(kRewardX, g.reward[size_t(k)]);
      extreme(kAdvX, g.advantage[size_t(k)]);
      extreme(kRespLenX, R);
      extreme(kPromptLenX, P);
    }
  }
  const GeneratedStats& gs = gen.generated;
  const UpdatePhaseResult::RolloutCorrection& rc = update.rollout_corr;
  std::vector<double> gsum{gs.responses,   gs.acc,           gs.score,         gs.response_tokens,
                           gs.truncated,   gs.sampled_prob,  gs.spec_drafted,  gs.spec_accepted,
                           rc.tokens,      rc.k3_sum,        rc.abs_diff_sum};
  hi[kCorrDiffX] = rc.abs_diff_max;
  // tp ranks of a dp group hold the same groups: reduce over dp only.
  grid.dp.all_reduce_f64(sum, parallel::ReduceOp::sum);
  grid.dp.all_reduce_f64(gsum, parallel::ReduceOp::sum);
  grid.dp.all_reduce_f64(hi, parallel::ReduceOp::max);
  grid.dp.all_reduce_f64(lo, parallel::ReduceOp::max);
  // Phase times: the slowest rank sets the pace.
  std::vector<double> times{gs.generation_s, gs.verify_s, gen.balance_s, update.old_logprob_s, update.ref_s,
                            update.update_s};
  grid.world.all_reduce_f64(times, parallel::ReduceOp::max);

  auto mean = [&](Sum s) { return sum[kResponses] > 0 ? sum[s] / sum[kResponses] : 0.0; };
  auto div = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const rl::RoundCounts totals = gen.sampler.totals();
  double worst = 0;
  const int D = gen.plan.dp_size;
  for (int64_t m = 0; m < gen.plan.num_mini_batches(); ++m) {
    const auto first = gen.plan.load.begin() + m * D, last = first + D;
    const int64_t mx = *std::max_element(first, last), mn = *std::min_element(first, last);
    const double spread = mn > 0 ? double(mx) / double(mn) - 1.0 : (mx > 0 ? 1e9 : 0.0);
    worst = std::max(worst, spread);
  }
  const double steps = double(std::max<int64_t>(1, update.optimizer_steps));
  const rl::PolicyLossMetrics& L = update.loss;

  Metrics m;
  m.add("gen/acc/mean", div(gsum[1], gsum[0]))
      .add("gen/score/mean", div(gsum[2], gsum[0]))
      .add("gen/response_length/mean", div(gsum[3], gsum[0]))
      .add("gen/response_length/clip_ratio", div(gsum[4], gsum[0]))
      .add("gen/mean_prob", div(gsum[5], gsum[3]))
      .add("rollout_corr/kl", div(gsum[9], gsum[8]))
      .add("rollout_corr/max_abs_logprob_diff", hi[kCorrDiffX])
      .add("rollout_corr/mean_abs_logprob_diff", div(gsum[10], gsum[8]))
      .add("rollout_corr/tokens", gsum[8])
      .add("gen/spec_draft_tokens", gsum[6])
      .add("gen/spec_accept_rate", div(gsum[7], gsum[6]))
      .add("critic/score/mean", mean(kScore))
      .add("critic/score/max", hi[kScoreX])
      .add("critic/score/min", -lo[kScoreX])
      .add("critic/rewards/mean", mean(kReward))
      .add("critic/rewards/max", hi[kRewardX])
      .add("critic/rewards/min", -lo[kRewardX])
      .add("critic/advantages/mean", mean(kAdv))
      .add("critic/advantages/max", hi[kAdvX])
      .add("critic/advantages/min", -lo[kAdvX])
      .add("critic/acc/mean", mean(kAcc))
      .add("response_length/mean", mean(kRespLen))
      .add("response_length/max", hi[kRespLenX])
      .add("response_length/min", -lo[kRespLenX])
      .add("response_length/clip_ratio", mean(kClipped))
      .add("prompt_length/mean", mean(kPromptLen))
      .add("prompt_length/max", hi[kPromptLenX])
      .add("prompt_length/min", -lo[kPromptLenX])
      .add("train/num_gen_batches", gen.sampler.rounds())
      .add("train/num_groups_generated", totals.groups)
      .add("train/num_groups_all_correct", totals.all_correct)
      .add("train/num_groups_all_wrong", totals.all_wrong)
      .add("train/num_groups_kept", totals.kept)
      .add("train/kept_ratio", div(double(totals.kept), double(totals.groups)))
      .add("train/short_batch", gen.sampler.status() == rl::SamplingStatus::short_batch ? 1 : 0)
      .add("train/num_groups_trained", gen.plan.num_groups())
      .add("train/balance_moves", gen.plan.moves())
      .add("train/balance_imbalance", worst)
      .add("actor/pg_loss", L.pg_loss / steps);
  if (config.algorithm.kl_coef > 0) m.add("actor/kl_loss", L.kl_loss / steps);
  m.add("actor/entropy", L.entropy_mean())
      .add("actor/pg_clipfrac", L.pg_clipfrac())
      .add("actor/pg_clipfrac_high", L.pg_clipfrac_high())
      .add("actor/pg_clipfrac_low", L.pg_clipfrac_low())
      .add("actor/pg_clipfrac_lower", L.pg_clipfrac_lower())
      .add("actor/clipped_high_prob_mean", L.clipped_high_prob_mean())
      .add("actor/clipped_high_prob_max", L.clipped_high_prob_max)
      .add("actor/ppo_kl", L.ppo_kl())
      .add("actor/grad_norm", update.grad_norm_mean)
      .add("actor/lr", update.lr)
      .add("actor/skipped_steps", update.skipped_steps)
      .add("timing_s/gen", times[0])
      .add("timing_s/gen_dp_idle", gs.dp_idle_s)
      .add("timing_s/reward", times[1])
      .add("timing_s/balance", times[2])
      .add("timing_s/old_log_prob", times[3]);
  if (config.algorithm.kl_coef > 0) m.add("timing_s/ref", times[4]);
  m.add("timing_s/update_actor", times[5])
      .add("timing_s/step", step_seconds)
      .add("perf/total_num_tokens", int64_t(sum[kTokens]))
      .add("perf/throughput", div(sum[kTokens], step_seconds * double(grid.world_size())))
      .add("perf/gen_throughput", div(gsum[3], times[0]));
  return m;
}

std::string dapo_step_line(int64_t step, int64_t total_steps, const Metrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step %lld/%lld  acc %.3f  score %.3f  kept %lld/%lld groups in %lld round%s  entropy %.3f  "
                "clip %.4f (high %.4f low %.4f)  grad_norm %.3f  lr %.3g  len %.1f (clip %.2f)  %.1f s "
                "(gen %.1f, update %.1f)",
                (long long)step, (long long)total_steps, m.get("gen/acc/mean"), m.get("gen/score/mean"),
                (long long)m.get("train/num_groups_kept"),
                (long long)m.get("train/num_groups_generated"), (long long)m.get("train/num_gen_batches"),
                m.get("train/num_gen_batches") == 1 ? "" : "s", m.get("actor/entropy"), m.get("actor/pg_clipfrac"),
                m.get("actor/pg_clipfrac_high"), m.get("actor/pg_clipfrac_low"), m.get("actor/grad_norm"),
                m.get("actor/lr"), m.get("gen/response_length/mean"), m.get("gen/response_length/clip_ratio"),
                m.get("timing_s/step"), m.get("timing_s/gen"), m.get("timing_s/update_actor"));
  return buf;
}

}  // namespace dapo::trainer
