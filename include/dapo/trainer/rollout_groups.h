// From the generation engine's output to scored GRPO groups (docs/DESIGN.md
// section 2, phase 3): every response decoded, verified against its prompt's
// ground truth (reward/verifier.h, on all CPU threads), given DAPO's soft
// overlong punishment and the overlong-filter mask (rl/rewards.h), and the
// group classified for dynamic sampling (rl/dynamic_sampling.h).
//
// One GroupData per prompt holds what every later phase and the rollout
// dump need: token ids, decoded text, extracted answer, score, acc, shaped
// reward, in-loss flag, finish reason. Advantages and old log-probs are
// added by the update phase.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/dataset.h"
#include "dapo/data/tokenizer.h"
#include "dapo/reward/overlong.h"
#include "dapo/rl/dynamic_sampling.h"
#include "dapo/rl/group_data.h"
#include "dapo/rollout/rollout_batch.h"

namespace dapo::trainer {

struct RewardSettings {
  const data::Tokenizer* tokenizer = nullptr;  // decodes the responses (required)
  reward::OverlongShaping shaping;
  FilterMetric filter_metric = FilterMetric::acc;
  RewardVerifier verifier = RewardVerifier::symbolic;  // reward.verifier
  bool dynamic_sampling = true;  // false: every group is `mixed` (kept)
};
RewardSettings reward_settings(const Config& config, const data::Tokenizer& tokenizer);

// A prompt of a generation round: its record and its place in the round's
// generation batch (the dynamic sampler's order).
struct RoundPrompt {
  const data::PromptRecord* record = nullptr;
  int64_t position = 0;
};

// batch: what GenerationEngine::generate returned for `prompts` (same order,
// n responses each, ordered by sample index). Returns one group per prompt
// with round = `round`. Mismatched sizes are a bug (DAPO_CHECK).
std::vector<rl::GroupData> score_rollouts(const rollout::RolloutBatch& batch, std::span<const RoundPrompt> prompts,
                                          int64_t round, const RewardSettings& settings);

// The group's class under settings.filter_metric (mixed for every group
// when dynamic sampling is off).
rl::GroupOutcome group_outcome(const rl::GroupData& group, const RewardSettings& settings);

}  // namespace dapo::trainer
