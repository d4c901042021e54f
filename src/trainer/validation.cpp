// run_validation: generate k samples per problem, verify, reduce per source.
#include "dapo/trainer/validation.h"

#include <algorithm>
#include <map>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"
#include "dapo/reward/verify.h"
#include "dapo/trainer/timing.h"

namespace dapo::trainer {
namespace {

constexpr uint64_t kValidationTag = 0x76616C6964617465ull;  // "validate"

// Sums per source, in the order of `names`: problems, acc, pass, score,
// tokens, responses, and the other verifier's acc and pass.
constexpr size_t kSums = 8;

}  // namespace

uint64_t validation_step_key() { return stream_id({kValidationTag}); }

void ValidationResult::add_to(Metrics& metrics) const {
  const std::string at = "@" + std::to_string(k);
  for (const SourceValidation& s : sources) {
    metrics.add("val-core/" + s.source + "/acc/mean" + at, s.acc_mean);
    metrics.add("val-core/" + s.source + "/acc/pass" + at, s.acc_pass);
    metrics.add("val-aux/" + s.source + "/score/mean" + at, s.score_mean);
    metrics.add("val-aux/" + s.source + "/response_length/mean", s.length_mean);
    const std::string other = "val-aux/" + s.source + "/" + to_string(other_verifier) + "/acc/";
    metrics.add(other + "mean" + at, s.other_acc_mean);
    metrics.add(other + "pass" + at, s.other_acc_pass);
  }
  metrics.add("timing_s/testing", seconds);
}

ValidationResult run_validation(rollout::GenerationEngine& engine, const PromptSet& problems,
                                rollout::SamplingOptions sampling, const RewardSettings& rewards,
                                const parallel::Grid& grid, const rollout::ProgressCallback& progress) {
  const auto start = Clock::now();
  sampling.step = validation_step_key();
  // Every rank knows every source: the index of each in the sorted list.
  std::map<std::string, size_t> index;
  for (int64_t i = 0; i < problems.size(); ++i) index.emplace(problems.record(i).data_source, 0);
  size_t next = 0;
  for (auto& [name, at] : index) at = next++;

  const int64_t P = problems.size(), D = grid.dp_size, d = grid.dp_rank;
  std::vector<rollout::PromptInput> inputs;
  std::vector<RoundPrompt> prompts;
  for (int64_t i = d * P / D; i < (d + 1) * P / D; ++i) {
    const std::span<const int32_t> ids = problems.ids(i);
    inputs.push_back({problems.record(i).uid, std::vector<int32_t>(ids.begin(), ids.end())});
    prompts.push_back({&problems.record(i), i});
  }
  const rollout::RolloutBatch batch = engine.generate(inputs, sampling, progress);
  const std::vector<rl::GroupData> groups = score_rollouts(batch, prompts, 0, rewards);
  // The other verifier on the same responses (decoded once, in the groups).
  const RewardVerifier other = reward::other_verifier(rewards.verifier);
  std::vector<std::vector<double>> other_acc(groups.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t gi = 0; gi < int64_t(groups.size()); ++gi) {
    const rl::GroupData& g = groups[size_t(gi)];
    for (int64_t k = 0; k < g.num_responses(); ++k)
      other_acc[size_t(gi)].push_back(reward::verify(other, g.response_text[size_t(k)], g.ground_truth).acc ? 1 : 0);
  }

  std::vector<double> sums(index.size() * kSums, 0.0);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const rl::GroupData& g = groups[gi];
    double* s = &sums[index.at(g.data_source) * kSums];
    double any = 0, other_any = 0;
    for (int64_t k = 0; k < g.num_responses(); ++k) {
      s[1] += g.acc[size_t(k)];
      s[3] += g.score[size_t(k)];
      s[4] += double(g.response_length(k));
      s[5] += 1;
      s[6] += other_acc[gi][size_t(k)];
      any = std::max(any, g.acc[size_t(k)]);
      other_any = std::max(other_any, other_acc[gi][size_t(k)]);
    }
    s[0] += 1;
    s[2] += any;
    s[7] += other_any;
  }
  // tp ranks of a dp group hold the same groups: reduce over dp only.
  grid.dp.all_reduce_f64(sums, parallel::ReduceOp::sum);

  ValidationResult res;
  res.k = sampling.n;
  res.verifier = rewards.verifier;
  res.other_verifier = other;
  double acc = 0, pass = 0, responses = 0;
  for (const auto& [name, at] : index) {
    const double* s = &sums[at * kSums];
    SourceValidation v;
    v.source = name;
    v.problems = int64_t(s[0]);
    v.acc_mean = s[5] > 0 ? s[1] / s[5] : 0;
    v.acc_pass = s[0] > 0 ? s[2] / s[0] : 0;
    v.score_mean = s[5] > 0 ? s[3] / s[5] : 0;
    v.length_mean = s[5] > 0 ? s[4] / s[5] : 0;
    v.other_acc_mean = s[5] > 0 ? s[6] / s[5] : 0;
    v.other_acc_pass = s[0] > 0 ? s[7] / s[0] : 0;
    res.problems += v.problems;
    acc += s[1];
    pass += s[2];
    responses += s[5];
    res.sources.push_back(v);
  }
  res.acc_mean = responses > 0 ? acc / responses : 0;
  res.acc_pass = res.problems > 0 ? pass / double(res.problems) : 0;
  res.seconds = root_seconds_since(grid.world, start);
  return res;
}

}  // namespace dapo::trainer
