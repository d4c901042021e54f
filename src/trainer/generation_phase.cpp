// Generation rounds -> dynamic sampling -> balance -> exchange.
#include "dapo/trainer/generation_phase.h"

#include <algorithm>
#include <cmath>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"
#include "dapo/trainer/timing.h"

namespace dapo::trainer {
namespace {

// "rolloutk" in ASCII: keeps these keys apart from other users of stream_id.
constexpr uint64_t kRolloutStepTag = 0x726F6C6C6F75746Bull;


}  // namespace

uint64_t rollout_step_key(int64_t step, int64_t round) {
  return stream_id({kRolloutStepTag, uint64_t(step), uint64_t(round)});
}

double dp_round_idle(const parallel::Comm& dp, double round_s) {
  const double slowest = dp.all_reduce_f64(round_s, parallel::ReduceOp::max);
  const double total = dp.all_reduce_f64(round_s, parallel::ReduceOp::sum);
  return std::max(0.0, slowest - total / double(dp.size()));
}

GenerationResult run_generation_phase(GenerationContext& ctx, const parallel::Grid& grid, int64_t step) {
  DAPO_CHECK(ctx.engine && ctx.prompts && ctx.order, "run_generation_phase: incomplete context");
  GenerationResult res;
  res.sampler = rl::DynamicSampler(ctx.dynamic_sampling);
  const int64_t G = ctx.gen_batch_size, D = grid.dp_size, d = grid.dp_rank;
  std::vector<std::vector<rl::GroupData>>& rounds = res.rounds;

  while (res.sampler.status() == rl::SamplingStatus::need_more) {
    const int64_t round = res.sampler.rounds();
    const std::vector<int64_t> batch = ctx.order->next_batch(G);
    std::vector<rollout::PromptInput> inputs;
    std::vector<RoundPrompt> prompts;
    for (int64_t pos = d * G / D; pos < (d + 1) * G / D; ++pos) {
      const int64_t i = batch[size_t(pos)];
      const std::span<const int32_t> ids = ctx.prompts->ids(i);
      inputs.push_back({ctx.prompts->record(i).uid, std::vector<int32_t>(ids.begin(), ids.end())});
      prompts.push_back({&ctx.prompts->record(i), pos});
    }
    rollout::SamplingOptions sampling = ctx.sampling;
    sampling.step = rollout_step_key(step, round);
    auto t0 = Clock::now();
    const rollout::RolloutBatch out = ctx.engine->generate(inputs, sampling, ctx.progress);
    const double round_s = seconds_since(t0);
    res.generated.spec_drafted += double(ctx.engine->stats().scheduler.drafted_tokens);
    res.generated.spec_accepted += double(ctx.engine->stats().scheduler.accepted_tokens);
    res.generated.generation_s += round_s;
    // The ranks whose answers were short wait for the slowest one at the
    // sampler's all-gather below: what that wait costs each round.
    res.generated.dp_idle_s += dp_round_idle(grid.dp, round_s);

    for (const float lp : out.sampling_logprobs) res.generated.sampled_prob += std::exp(double(lp));
    t0 = Clock::now();
    std::vector<rl::GroupData> groups = score_rollouts(out, prompts, round, ctx.rewards);
    std::vector<rl::GroupCandidate> candidates;
    candidates.reserve(groups.size());
    for (const rl::GroupData& g : groups) {
      candidates.push_back({g.position, g.uid, g.packed_tokens(), group_outcome(g, ctx.rewards)});
      for (int64_t k = 0; k < g.num_responses(); ++k) {
        res.generated.responses += 1;
        res.generated.acc += g.acc[size_t(k)];
        res.generated.score += g.score[size_t(k)];
        res.generated.response_tokens += double(g.response_length(k));
        res.generated.truncated += g.finish_reason[size_t(k)] == uint8_t(rollout::FinishReason::length) ? 1 : 0;
      }
    }
    res.generated.verify_s += seconds_since(t0);
    res.sampler.add_round(grid.dp, candidates);
    rounds.push_back(std::move(groups));
  }
  if (res.sampler.status() == rl::SamplingStatus::exhausted) throw UserError(res.sampler.exhausted_message());
  // A short batch (rollout.on_short_batch = train | skip) goes on with the
  // groups kept, or none: the plan and the exchange are empty then.

  const auto t0 = Clock::now();
  const std::vector<rl::SelectedGroup> selection = res.sampler.selection();
  res.plan = rl::plan_balance(rl::balance_items(selection), D, ctx.mini_batch_groups);
  std::vector<rl::GroupBlob> local;
  for (size_t i = 0; i < selection.size(); ++i) {
    const rl::SelectedGroup& s = selection[i];
    if (s.rank != d) continue;
    const rl::GroupData& g = rounds[size_t(s.round)][size_t(s.local_index)];
    DAPO_CHECK(g.uid == s.uid && g.position == s.position, "selection ", i, " does not match this rank's group");
    local.push_back({int64_t(i), rl::serialize_group(g)});
  }
  for (rl::GroupBlob& b : rl::exchange_groups(grid.dp, res.plan, std::move(local))) {
    res.selection_index.push_back(b.index);
    res.groups.push_back(rl::deserialize_group(b.bytes));
  }
  res.balance_s = seconds_since(t0);
  return res;
}

}  // namespace dapo::trainer
