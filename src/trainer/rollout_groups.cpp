// score_rollouts: decode, verify, shape, classify.
#include "dapo/trainer/rollout_groups.h"

#include "dapo/core/error.h"
#include "dapo/reward/verify.h"
#include "dapo/rl/rewards.h"

namespace dapo::trainer {

RewardSettings reward_settings(const Config& config, const data::Tokenizer& tokenizer) {
  RewardSettings s;
  s.tokenizer = &tokenizer;
  s.shaping = reward::overlong_shaping(config);
  s.filter_metric = config.algorithm.filter_metric;
  s.dynamic_sampling = config.algorithm.dynamic_sampling;
  s.verifier = config.reward.verifier;
  return s;
}

std::vector<rl::GroupData> score_rollouts(const rollout::RolloutBatch& batch, std::span<const RoundPrompt> prompts,
                                          int64_t round, const RewardSettings& settings) {
  DAPO_CHECK(settings.tokenizer != nullptr, "score_rollouts needs a tokenizer");
  const int64_t P = int64_t(prompts.size()), R = batch.num_responses();
  DAPO_CHECK(batch.num_prompts() == P, "score_rollouts: ", batch.num_prompts(), " prompts in the batch, ", P, " given");
  DAPO_CHECK(P == 0 || R % P == 0, "score_rollouts: ", R, " responses for ", P, " prompts");
  const int64_t n = P == 0 ? 0 : R / P;

  // Decode and verify every response on all threads; both are thread-safe.
  // Ids the tokenizer does not know (a model vocabulary padded past the
  // tokenizer's, which an untrained model samples) are left out of the text.
  std::vector<std::string> text(static_cast<size_t>(R));
  std::vector<reward::Verdict> verdict(static_cast<size_t>(R));
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t r = 0; r < R; ++r) {
    const int64_t p = batch.response_prompt[size_t(r)];
    std::vector<int32_t> known;
    for (const int32_t id : batch.response(r))
      if (settings.tokenizer->has_id(id)) known.push_back(id);
    text[size_t(r)] = settings.tokenizer->decode(known, true);
    verdict[size_t(r)] = reward::verify(settings.verifier, text[size_t(r)], prompts[size_t(p)].record->ground_truth);
  }

  std::vector<rl::GroupData> groups(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p) {
    const data::PromptRecord& rec = *prompts[size_t(p)].record;
    DAPO_CHECK(batch.prompt_uid[size_t(p)] == rec.uid, "score_rollouts: prompt ", p, " is not ", rec.where());
    rl::GroupData& g = groups[size_t(p)];
    g.uid = int64_t(rec.uid);
    g.round = round;
    g.position = prompts[size_t(p)].position;
    g.data_source = rec.data_source;
    g.ground_truth = rec.ground_truth;
    const std::span<const int32_t> prompt_ids = batch.prompt(p);
    g.prompt_ids.assign(prompt_ids.begin(), prompt_ids.end());
    g.prompt_text = settings.tokenizer->decode(prompt_ids, false);  // PromptSet checked its ids
    for (int64_t k = 0; k < n; ++k) {
      const int64_t r = p * n + k;
      DAPO_CHECK(batch.response_prompt[size_t(r)] == p && batch.sample_index[size_t(r)] == k,
                 "score_rollouts: response ", r, " is not sample ", k, " of prompt ", p);
      const std::span<const int32_t> ids = batch.response(r);
      g.response_ids.insert(g.response_ids.end(), ids.begin(), ids.end());
      g.response_offsets.push_back(int64_t(g.response_ids.size()));
      const std::span<const float> lp = batch.logprobs(r);
      g.sampling_logprobs.insert(g.sampling_logprobs.end(), lp.begin(), lp.end());
      const rollout::FinishReason finish = batch.finish_reason[size_t(r)];
      g.finish_reason.push_back(uint8_t(finish));
      const reward::Verdict& v = verdict[size_t(r)];
      const reward::ShapedReward s = reward::shape_reward(v.score, int64_t(ids.size()),
                                                          finish == rollout::FinishReason::length, settings.shaping);
      g.score.push_back(v.score);
      g.acc.push_back(v.acc ? 1.0 : 0.0);
      g.reward.push_back(s.reward);
      g.in_loss.push_back(s.in_loss ? 1 : 0);
      g.response_text.push_back(std::move(text[size_t(r)]));
      g.pred.push_back(v.pred);
    }
  }
  return groups;
}

rl::GroupOutcome group_outcome(const rl::GroupData& group, const RewardSettings& settings) {
  if (!settings.dynamic_sampling) return rl::GroupOutcome::mixed;
  const int64_t n = group.num_responses();
  std::vector<double> metric(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    rl::ResponseReward r;
    r.score = group.score[size_t(k)];
    r.acc = group.acc[size_t(k)];
    r.reward = group.reward[size_t(k)];
    metric[size_t(k)] = rl::filter_metric_value(settings.filter_metric, r);
  }
  return rl::classify_group(metric, group.acc);
}

}  // namespace dapo::trainer
