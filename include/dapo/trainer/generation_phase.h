// Phases 1-5 of a DAPO step (docs/DESIGN.md section 2): generation rounds with
// dynamic sampling, then the kept groups balanced over the dp ranks.
//
// Round r of step s: the next rollout.gen_batch_size prompts of the
// PromptOrder (the same batch on every rank); dp rank d takes positions
// [d*G/D, (d+1)*G/D) of it; its tp ranks generate n responses per prompt
// together, with the sampler's stream key `step` = rollout_step_key(s, r),
// so a prompt drawn twice in one step (an epoch boundary) gets fresh
// samples; the responses are scored (rollout_groups.h) and classified; the
// dynamic sampler's all-gathers give every rank the same decision. Rounds
// continue until train.train_batch_size groups are kept. Running out of
// rounds (rollout.max_num_gen_batches) goes on with the groups kept
// (rollout.on_short_batch = train), with none (skip), or is a UserError
// with the per-round counts, raised on every rank alike (fail).
//
// Then the selection is cut into mini-batches of train.ppo_mini_batch_size
// groups, balanced by packed tokens (rl/balance.h), and the groups move to
// their ranks with one all-to-all-v over dp.
#pragma once

#include <cstdint>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/prompt_order.h"
#include "dapo/parallel/grid.h"
#include "dapo/rl/balance.h"
#include "dapo/rl/dynamic_sampling.h"
#include "dapo/rl/group_data.h"
#include "dapo/rollout/engine.h"
#include "dapo/trainer/prompt_set.h"
#include "dapo/trainer/rollout_groups.h"

namespace dapo::trainer {

// The sampler's `step` field for generation round `round` of training step
// `step` (1-based). Part of the reproducibility contract: changing it
// changes every sample of a resumed run.
uint64_t rollout_step_key(int64_t step, int64_t round);

// What every generated group (kept or not) of one rank looked like, for
// the step's metrics; sums over this rank's groups (reduce over dp).
struct GeneratedStats {
  double responses = 0;
  double acc = 0;               // sum of acc
  double score = 0;             // sum of verifier scores
  double response_tokens = 0;
  double truncated = 0;         // finish reason `length`
  // Sum over response tokens of the sampled token's probability under
  // softmax(logits / T) (ops/sampling.h): the sampling distribution when
  // top_p = 1 and top_k is off, as in the recipes -> gen/mean_prob.
  double sampled_prob = 0;
  double generation_s = 0;      // this rank's time in GenerationEngine::generate
  double verify_s = 0;          // decoding, verifying and shaping
  // The dp barrier at the end of each round (the same on every rank): how
  // long the dp ranks waited for the slowest one's generate() on average
  // (max - mean of their times), summed over the rounds.
  double dp_idle_s = 0;
  // Exact speculative decoding: draft tokens run and taken (gen/spec_*).
  double spec_drafted = 0;
  double spec_accepted = 0;
};

// The dp barrier of one round: each dp rank passes its generate() time;
// returns, on every rank, how long the dp ranks wait on average for the
// slowest one (its time less their mean). Collective over `dp`.
double dp_round_idle(const parallel::Comm& dp, double round_s);

struct GenerationResult {
  rl::DynamicSampler sampler{rl::DynamicSamplingOptions{}};  // rounds, counts, selection
  // This rank's groups of every round, kept or not (the rollout dump's
  // rows; selected ones are also copied into `groups`).
  std::vector<std::vector<rl::GroupData>> rounds;
  rl::BalancePlan plan;                   // of the selection over dp
  std::vector<rl::GroupData> groups;      // this rank's groups to train on, ascending selection index
  std::vector<int64_t> selection_index;   // (groups) index of each in the selection
  GeneratedStats generated;               // this rank's, all rounds
  double balance_s = 0;
};

struct GenerationContext {
  rollout::GenerationEngine* engine = nullptr;
  const PromptSet* prompts = nullptr;
  data::PromptOrder* order = nullptr;     // advanced by every round
  RewardSettings rewards;
  rollout::SamplingOptions sampling;      // its `step` is set per round
  int64_t gen_batch_size = 1;
  int64_t mini_batch_groups = 1;
  rl::DynamicSamplingOptions dynamic_sampling;
  rollout::ProgressCallback progress;     // optional, per engine step
};

// Collective over grid.world. `step` is the 1-based training step.
GenerationResult run_generation_phase(GenerationContext& ctx, const parallel::Grid& grid, int64_t step);

}  // namespace dapo::trainer
