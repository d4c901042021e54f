// Dynamic sampling (DAPO, arXiv:2503.14476 section 3.2; docs/DESIGN.md section 2,
// phase 4): keep a group iff its filter metric is not the same for all of
// its responses (a group whose responses are all right or all wrong has
// zero advantages and no gradient), generating more rounds of prompts
// until train_batch_size groups are kept or rollout.max_num_gen_batches
// rounds are spent.
//
// Coordination over data-parallel ranks. In each generation round every
// dp rank holds some groups (its share of the round's prompts). Each rank
// classifies its own groups (classify_group) and calls add_round with them;
// add_round gathers every rank's candidates (two all-gathers over the dp
// Comm), so every rank holds the same global view and takes the same
// decision: the same status, the same counts, the same selection. No rank
// ever waits for a round another rank does not run, so a failure to find
// enough groups ends in `short_batch` or `exhausted` on every rank - never
// a hang.
//
// A model that solves most prompts must not end its own run: after
// max_num_gen_batches rounds with fewer than train_batch_size kept groups,
// rollout.on_short_batch = train (the default) trains on the groups kept,
// skip trains on none, and fail stops the run with exhausted_message().
//
// Selection is independent of the number of ranks: kept groups are ordered
// by (round, position), position being the prompt's place in its round's
// generation batch (what the prompt loader's order fixes), and the first
// train_batch_size of them are taken. This is verl's choice (it
// concatenates rounds and keeps the head of the batch).
//
// tp ranks: every tp rank of a dp group holds the same groups; each calls
// with its own dp Comm (the ranks of the same tp rank), and all reach the
// same result.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dapo/core/config.h"

namespace dapo::parallel {
class Comm;
}

namespace dapo::rl {

// What a group's responses look like under the filter metric.
enum class GroupOutcome : uint8_t {
  mixed,          // the metric differs between responses: informative, kept
  all_correct,    // the metric is uniform and every response is correct (acc > 0)
  all_wrong,      // the metric is uniform and every response is wrong (acc == 0)
  uniform_other,  // the metric is uniform but correctness is mixed (possible with seq_reward)
};
const char* group_outcome_name(GroupOutcome o);

// metric, acc: (n) per response (filter_metric_value and acc of
// rewards.h). Exact comparison: uniform means all values are equal. A group
// of one response is uniform (nothing to compare; verl would keep it, but
// the configuration rejects dynamic sampling with rollout.n < 2, so the
// case only arises with dynamic sampling off, where every group is kept).
// Requires n >= 1 and finite values (DAPO_CHECK).
GroupOutcome classify_group(std::span<const double> metric, std::span<const double> acc);

// One group of this rank in the current round.
struct GroupCandidate {
  int64_t position = 0;  // the prompt's place in the round's generation batch; unique per round
  int64_t uid = 0;       // prompt uid, carried along
  int64_t tokens = 0;    // packed tokens (prompt + response per response), the balancing weight
  GroupOutcome outcome = GroupOutcome::mixed;
};

// Counts of one round, over all dp ranks.
struct RoundCounts {
  int64_t groups = 0;
  int64_t all_correct = 0;
  int64_t all_wrong = 0;
  int64_t uniform_other = 0;
  int64_t kept = 0;  // mixed groups (all groups when dynamic sampling is off)
};

// A kept group chosen for the update, and where it lives.
struct SelectedGroup {
  int64_t round = 0;        // 0-based generation round
  int64_t position = 0;
  int64_t uid = 0;
  int64_t tokens = 0;
  int rank = 0;             // dp rank that holds it (generated it)
  int64_t local_index = 0;  // its index in that rank's candidate list of that round
};

enum class SamplingStatus : uint8_t {
  need_more,  // generate another round
  done,       // train_batch_size groups are kept: selection() is ready
  short_batch,  // max_num_gen_batches rounds without enough groups, on_short train or skip: selection()
  exhausted,    // the same with on_short fail: exhausted_message()
};

struct DynamicSamplingOptions {
  bool enabled = true;                 // false: every group is kept
  FilterMetric metric = FilterMetric::acc;  // for messages
  int64_t train_batch_size = 1;        // groups per step, >= 1
  int64_t max_num_gen_batches = 0;     // rounds before giving up; 0: no limit
  ShortBatch on_short = ShortBatch::train;  // what ends a step that runs out of rounds
};
DynamicSamplingOptions dynamic_sampling_options(const Config& config);

// The state of one training step's generation rounds. Not thread-safe;
// one per step.
class DynamicSampler {
 public:
  explicit DynamicSampler(const DynamicSamplingOptions& options);

  // Collective over `dp`: every rank calls it once per round, in the same
  // rounds, with its own candidates of the round (possibly none). Returns
  // the round's global counts. Only while status() is need_more.
  const RoundCounts& add_round(const parallel::Comm& dp, std::span<const GroupCandidate> local);
  // What add_round does once every rank's candidates are known:
  // per_rank[r] holds rank r's candidates. No MPI (tests, one process).
  const RoundCounts& add_gathered_round(const std::vector<std::vector<GroupCandidate>>& per_rank);

  SamplingStatus status() const { return status_; }
  int64_t rounds() const { return int64_t(rounds_.size()); }  // train/num_gen_batches
  int64_t kept() const { return int64_t(kept_.size()); }       // kept so far, may exceed train_batch_size
  const std::vector<RoundCounts>& round_counts() const { return rounds_; }
  RoundCounts totals() const;
  const DynamicSamplingOptions& options() const { return options_; }

  // status() == done: exactly train_batch_size groups in (round, position)
  // order; short_batch: every group kept (on_short train) or none (skip).
  // The same on every rank.
  std::vector<SelectedGroup> selection() const;
  // status() == exhausted: what to tell the user - the per-round counts
  // and which settings to change. The same on every rank.
  std::string exhausted_message() const;
  // status() == short_batch: the warning, with the same counts.
  std::string short_batch_message() const;
  // "rounds R: [r] G groups (C all correct, W all wrong, U other uniform, K kept); ..."
  std::string counts_line() const;

 private:
  std::string shortfall_text() const;

  DynamicSamplingOptions options_;
  SamplingStatus status_ = SamplingStatus::need_more;
  std::vector<RoundCounts> rounds_;
  std::vector<SelectedGroup> kept_;  // in (round, position) order
};

}  // namespace dapo::rl
