// Dynamic sampling: group classification, the per-round gather over dp
// ranks and the deterministic selection (dynamic_sampling.h).
#include "dapo/rl/dynamic_sampling.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "dapo/core/error.h"
#include "dapo/parallel/comm.h"

namespace dapo::rl {
namespace {

constexpr int64_t kFields = 4;  // position, uid, tokens, outcome per candidate on the wire

bool kept_outcome(bool enabled, GroupOutcome o) { return !enabled || o == GroupOutcome::mixed; }

std::string round_text(size_t r, const RoundCounts& c) {
  return cat("[", r + 1, "] ", c.groups, " groups (", c.all_correct, " all correct, ", c.all_wrong, " all wrong, ",
             c.uniform_other, " other uniform, ", c.kept, " kept)");
}

}  // namespace

const char* group_outcome_name(GroupOutcome o) {
  switch (o) {
    case GroupOutcome::mixed: return "mixed";
    case GroupOutcome::all_correct: return "all_correct";
    case GroupOutcome::all_wrong: return "all_wrong";
    case GroupOutcome::uniform_other: return "uniform_other";
  }
  return "?";
}

GroupOutcome classify_group(std::span<const double> metric, std::span<const double> acc) {
  DAPO_CHECK(!metric.empty() && metric.size() == acc.size(), "classify_group: ", metric.size(), " metric values, ",
             acc.size(), " acc values");
  bool uniform = true, any_correct = false, any_wrong = false;
  for (size_t i = 0; i < metric.size(); ++i) {
    DAPO_CHECK(std::isfinite(metric[i]) && std::isfinite(acc[i]), "classify_group: non-finite value at ", i);
    if (metric[i] != metric[0]) uniform = false;
    (acc[i] > 0 ? any_correct : any_wrong) = true;
  }
  if (!uniform) return GroupOutcome::mixed;
  if (!any_wrong) return GroupOutcome::all_correct;
  if (!any_correct) return GroupOutcome::all_wrong;
  return GroupOutcome::uniform_other;
}

DynamicSamplingOptions dynamic_sampling_options(const Config& config) {
  DynamicSamplingOptions o;
  o.enabled = config.algorithm.dynamic_sampling;
  o.metric = config.algorithm.filter_metric;
  o.train_batch_size = config.train.train_batch_size;
  o.max_num_gen_batches = config.rollout.max_num_gen_batches;
  o.on_short = config.rollout.on_short_batch;
  return o;
}

DynamicSampler::DynamicSampler(const DynamicSamplingOptions& options) : options_(options) {
  DAPO_CHECK(options.train_batch_size >= 1, "train_batch_size ", options.train_batch_size);
  DAPO_CHECK(options.max_num_gen_batches >= 0, "max_num_gen_batches ", options.max_num_gen_batches);
}

const RoundCounts& DynamicSampler::add_round(const parallel::Comm& dp, std::span<const GroupCandidate> local) {
  DAPO_CHECK(status_ == SamplingStatus::need_more, "add_round after the step's sampling ended");
  // Counts first, so every rank pads to the same length (all_gather_i64
  // needs equal lengths).
  const std::vector<int64_t> counts = dp.all_gather_i64(int64_t(local.size()));
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  std::vector<int64_t> mine(size_t(longest * kFields), -1);
  for (size_t i = 0; i < local.size(); ++i) {
    const GroupCandidate& c = local[i];
    mine[i * kFields + 0] = c.position;
    mine[i * kFields + 1] = c.uid;
    mine[i * kFields + 2] = c.tokens;
    mine[i * kFields + 3] = int64_t(c.outcome);
  }
  const std::vector<int64_t> all = dp.all_gather_i64(mine);
  std::vector<std::vector<GroupCandidate>> per_rank(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    const int64_t* base = all.data() + r * size_t(longest * kFields);
    for (int64_t i = 0; i < counts[r]; ++i) {
      const int64_t* f = base + i * kFields;
      per_rank[r].push_back({f[0], f[1], f[2], GroupOutcome(uint8_t(f[3]))});
    }
  }
  return add_gathered_round(per_rank);
}

const RoundCounts& DynamicSampler::add_gathered_round(const std::vector<std::vector<GroupCandidate>>& per_rank) {
  DAPO_CHECK(status_ == SamplingStatus::need_more, "add_round after the step's sampling ended");
  const int64_t round = rounds();
  RoundCounts c;
  std::vector<SelectedGroup> fresh;
  std::set<int64_t> positions;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (size_t i = 0; i < per_rank[r].size(); ++i) {
      const GroupCandidate& g = per_rank[r][i];
      DAPO_CHECK(positions.insert(g.position).second, "round ", round, ": position ", g.position,
                 " given twice (rank ", r, ")");
      DAPO_CHECK(g.tokens >= 0, "group uid ", g.uid, ": ", g.tokens, " tokens");
      ++c.groups;
      switch (g.outcome) {
        case GroupOutcome::mixed: break;
        case GroupOutcome::all_correct: ++c.all_correct; break;
        case GroupOutcome::all_wrong: ++c.all_wrong; break;
        case GroupOutcome::uniform_other: ++c.uniform_other; break;
        default: DAPO_FAIL("bad group outcome ", int(g.outcome));
      }
      if (!kept_outcome(options_.enabled, g.outcome)) continue;
      ++c.kept;
      fresh.push_back({round, g.position, g.uid, g.tokens, int(r), int64_t(i)});
    }
  }
  std::sort(fresh.begin(), fresh.end(),
            [](const SelectedGroup& a, const SelectedGroup& b) { return a.position < b.position; });
  kept_.insert(kept_.end(), fresh.begin(), fresh.end());
  rounds_.push_back(c);
  if (kept() >= options_.train_batch_size)
    status_ = SamplingStatus::done;
  else if (options_.max_num_gen_batches > 0 && rounds() >= options_.max_num_gen_batches)
    status_ = options_.on_short == ShortBatch::fail ? SamplingStatus::exhausted : SamplingStatus::short_batch;
  return rounds_.back();
}

RoundCounts DynamicSampler::totals() const {
  RoundCounts t;
  for (const RoundCounts& c : rounds_) {
    t.groups += c.groups;
    t.all_correct += c.all_correct;
    t.all_wrong += c.all_wrong;
    t.uniform_other += c.uniform_other;
    t.kept += c.kept;
  }
  return t;
}

std::vector<SelectedGroup> DynamicSampler::selection() const {
  if (status_ == SamplingStatus::short_batch)
    return options_.on_short == ShortBatch::train ? kept_ : std::vector<SelectedGroup>{};
  DAPO_CHECK(status_ == SamplingStatus::done, "selection() before train_batch_size groups were kept");
  return std::vector<SelectedGroup>(kept_.begin(), kept_.begin() + options_.train_batch_size);
}

std::string DynamicSampler::counts_line() const {
  std::string s = cat("rounds ", rounds(), ":");
  for (size_t r = 0; r < rounds_.size(); ++r) s += (r ? "; " : " ") + round_text(r, rounds_[r]);
  return s;
}

std::string DynamicSampler::shortfall_text() const {
  const RoundCounts t = totals();
  std::string s = cat("dynamic sampling: only ", kept(), " of train.train_batch_size = ", options_.train_batch_size,
                      " groups had responses that differ in algorithm.filter_metric = ", to_string(options_.metric),
                      " after ", rounds(), " generation rounds (rollout.max_num_gen_batches = ",
                      options_.max_num_gen_batches, "); in total ", t.groups, " groups: ", t.all_correct,
                      " all correct, ", t.all_wrong, " all wrong, ", t.uniform_other, " other uniform, ", t.kept,
                      " kept. Per round:");
  for (size_t r = 0; r < rounds_.size(); ++r) s += (r ? "; " : " ") + round_text(r, rounds_[r]);
  return s;
}

std::string DynamicSampler::exhausted_message() const {
  DAPO_CHECK(status_ == SamplingStatus::exhausted, "exhausted_message() while sampling is not exhausted");
  return shortfall_text() +
         ". Raise rollout.max_num_gen_batches (0: no limit) or rollout.gen_batch_size, or use prompts of a "
         "difficulty the model sometimes but not always solves (rollout.on_short_batch = train trains on the "
         "groups kept instead of stopping)";
}

std::string DynamicSampler::short_batch_message() const {
  DAPO_CHECK(status_ == SamplingStatus::short_batch, "short_batch_message() while the batch is not short");
  const bool train = options_.on_short == ShortBatch::train && kept() > 0;
  return shortfall_text() + (train ? cat(". Training on the ", kept(), " groups kept")
                                   : std::string(". No update this step")) +
         " (rollout.on_short_batch = " + to_string(options_.on_short) + ")";
}

}  // namespace dapo::rl
