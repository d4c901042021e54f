// Balancing the kept groups over data-parallel ranks by token count
// (docs/DESIGN.md section 2, phase 5), and the exchange that moves them.
//
// The plan. The selection (dynamic_sampling.h) is cut into mini-batches of
// `mini_batch_groups` consecutive groups (train.ppo_mini_batch_size); each
// mini-batch is balanced on its own, because every mini-batch ends in a
// synchronous optimizer step and the slowest rank sets its pace. Within a
// mini-batch, groups are placed longest first (ties: selection order) on
// the rank with the fewest tokens so far (ties: the rank that already holds
// the group, then the lowest rank): greedy LPT. A group stays whole. After
// every placement the most and least loaded ranks differ by at most the
// largest group of the mini-batch, so the final spread is within one
// group's size. The plan depends only on the selection and dp size, so
// every rank computes the same plan without talking.
//
// The exchange. Each rank serialises its own selected groups
// (group_data.h) and exchange_groups moves every group to its planned rank
// with one Comm::all_to_all_v; every group arrives exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dapo/rl/dynamic_sampling.h"

namespace dapo::parallel {
class Comm;
}

namespace dapo::rl {

struct BalanceItem {
  int64_t tokens = 0;  // >= 0
  int holder = 0;      // dp rank that holds it now
};

struct BalancePlan {
  int dp_size = 1;
  int64_t mini_batch_groups = 1;
  std::vector<int> dest;            // (N) rank each group trains on
  std::vector<int> holder;          // (N) rank each group is on before the exchange
  std::vector<int64_t> mini_batch;  // (N) index / mini_batch_groups
  // (num_mini_batches * dp_size): tokens of mini-batch m on rank r at [m * dp_size + r].
  std::vector<int64_t> load;

  int64_t num_groups() const { return int64_t(dest.size()); }
  int64_t num_mini_batches() const;
  int64_t moves() const;  // groups whose dest differs from their holder
  // Selection indices of the groups `rank` trains on in mini-batch `m`
  // (all of them for m = -1), ascending.
  std::vector<int64_t> groups_of(int rank, int64_t m = -1) const;
};

// items (N) in selection order. A full step's N is a multiple of
// mini_batch_groups (train_batch_size is one of ppo_mini_batch_size); a
// short batch (rollout.on_short_batch = train) may end in a partial
// mini-batch.
BalancePlan plan_balance(std::span<const BalanceItem> items, int dp_size, int64_t mini_batch_groups);
// The items of a selection.
std::vector<BalanceItem> balance_items(std::span<const SelectedGroup> selection);

// A serialised group and its index in the selection.
struct GroupBlob {
  int64_t index = 0;
  std::vector<std::byte> bytes;
};

// Collective over `dp` (size plan.dp_size). `local`: every group this rank
// holds in the plan (plan.holder[index] == dp.rank()), each exactly once.
// Returns the groups planned for this rank (plan.dest[index] == dp.rank()),
// ascending by index. A group staying on its rank is moved, not copied.
std::vector<GroupBlob> exchange_groups(const parallel::Comm& dp, const BalancePlan& plan,
                                       std::vector<GroupBlob> local);

}  // namespace dapo::rl
