// Token-balanced placement of kept groups and their exchange (balance.h).
#include "dapo/rl/balance.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "dapo/core/error.h"
#include "dapo/parallel/comm.h"
#include "dapo/rl/byte_codec.h"

namespace dapo::rl {

int64_t BalancePlan::num_mini_batches() const {
  return mini_batch_groups > 0 ? (num_groups() + mini_batch_groups - 1) / mini_batch_groups : 0;
}

int64_t BalancePlan::moves() const {
  int64_t n = 0;
  for (size_t i = 0; i < dest.size(); ++i) n += dest[i] != holder[i];
  return n;
}

std::vector<int64_t> BalancePlan::groups_of(int rank, int64_t m) const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < dest.size(); ++i)
    if (dest[i] == rank && (m < 0 || mini_batch[i] == m)) out.push_back(int64_t(i));
  return out;
}

std::vector<BalanceItem> balance_items(std::span<const SelectedGroup> selection) {
  std::vector<BalanceItem> items;
  items.reserve(selection.size());
  for (const SelectedGroup& g : selection) items.push_back({g.tokens, g.rank});
  return items;
}

BalancePlan plan_balance(std::span<const BalanceItem> items, int dp_size, int64_t mini_batch_groups) {
  DAPO_CHECK(dp_size >= 1, "dp size ", dp_size);
  DAPO_CHECK(mini_batch_groups >= 1, "mini-batches of ", mini_batch_groups, " groups");
  const int64_t n = int64_t(items.size());
  BalancePlan plan;
  plan.dp_size = dp_size;
  plan.mini_batch_groups = mini_batch_groups;
  plan.dest.assign(size_t(n), 0);
  plan.mini_batch.assign(size_t(n), 0);
  plan.holder.assign(size_t(n), 0);
  plan.load.assign(size_t((n + mini_batch_groups - 1) / mini_batch_groups * dp_size), 0);
  for (int64_t i = 0; i < n; ++i) {
    DAPO_CHECK(items[size_t(i)].tokens >= 0, "group ", i, ": ", items[size_t(i)].tokens, " tokens");
    DAPO_CHECK(items[size_t(i)].holder >= 0 && items[size_t(i)].holder < dp_size, "group ", i, " held by rank ",
               items[size_t(i)].holder, " of ", dp_size);
    plan.holder[size_t(i)] = items[size_t(i)].holder;
  }
  std::vector<int64_t> order;
  for (int64_t m = 0; m * mini_batch_groups < n; ++m) {
    const int64_t first = m * mini_batch_groups;
    order.resize(size_t(std::min(mini_batch_groups, n - first)));
    std::iota(order.begin(), order.end(), first);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return items[size_t(a)].tokens > items[size_t(b)].tokens; });
    int64_t* load = plan.load.data() + m * dp_size;
    for (int64_t i : order) {
      const int holder = items[size_t(i)].holder;
      // The holder when it is among the least loaded, else the lowest such rank.
      int best = holder;
      for (int r = 0; r < dp_size; ++r)
        if (load[r] < load[best]) best = r;
      plan.dest[size_t(i)] = best;
      plan.mini_batch[size_t(i)] = m;
      load[best] += items[size_t(i)].tokens;
    }
  }
  return plan;
}

std::vector<GroupBlob> exchange_groups(const parallel::Comm& dp, const BalancePlan& plan,
                                       std::vector<GroupBlob> local) {
  DAPO_CHECK(dp.size() == plan.dp_size, "exchange over ", dp.size(), " ranks with a plan for ", plan.dp_size);
  const int me = dp.rank();
  const int64_t n = plan.num_groups();
  std::vector<uint8_t> seen(size_t(n), 0);
  for (const GroupBlob& b : local) {
    DAPO_CHECK(b.index >= 0 && b.index < n, "group index ", b.index, " of ", n);
    DAPO_CHECK(plan.holder[size_t(b.index)] == me, "group ", b.index, " is planned as held by rank ",
               plan.holder[size_t(b.index)], ", not ", me);
    DAPO_CHECK(!seen[size_t(b.index)]++, "group ", b.index, " given twice");
  }
  for (int64_t i = 0; i < n; ++i)
    DAPO_CHECK(plan.holder[size_t(i)] != me || seen[size_t(i)], "rank ", me, " holds group ", i, " but did not give it");

  // Groups that stay are kept aside; the others go out as
  // [index i64][size i64][bytes] records, one buffer per destination.
  std::vector<GroupBlob> out;
  std::vector<ByteWriter> to(size_t(dp.size()));
  for (GroupBlob& b : local) {
    const int dest = plan.dest[size_t(b.index)];
    if (dest == me) {
      out.push_back(std::move(b));
      continue;
    }
    to[size_t(dest)].put<int64_t>(b.index);
    to[size_t(dest)].put_array(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.bytes.data()),
                                                        b.bytes.size()));
  }
  std::vector<std::vector<std::byte>> payloads;
  payloads.reserve(to.size());
  for (ByteWriter& w : to) payloads.push_back(w.take());
  const std::vector<std::byte> received = dp.all_to_all_v(payloads);

  ByteReader reader(received, "balance exchange");
  while (reader.remaining() > 0) {
    GroupBlob b;
    b.index = reader.get<int64_t>();
    const std::vector<uint8_t> raw = reader.get_array<uint8_t>();
    b.bytes.resize(raw.size());
    if (!raw.empty()) std::memcpy(b.bytes.data(), raw.data(), raw.size());
    DAPO_CHECK(b.index >= 0 && b.index < n && plan.dest[size_t(b.index)] == me, "received group ", b.index,
               " not planned for rank ", me);
    out.push_back(std::move(b));
  }
  std::sort(out.begin(), out.end(), [](const GroupBlob& a, const GroupBlob& b) { return a.index < b.index; });
  const std::vector<int64_t> want = plan.groups_of(me);
  DAPO_CHECK(out.size() == want.size(), "rank ", me, " received ", out.size(), " groups, planned ", want.size());
  for (size_t i = 0; i < out.size(); ++i)
    DAPO_CHECK(out[i].index == want[i], "rank ", me, ": group ", want[i], " missing or duplicated");
  return out;
}

}  // namespace dapo::rl
