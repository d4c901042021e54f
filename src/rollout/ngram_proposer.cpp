// n-gram draft tokens (ngram_proposer.h).
#include "dapo/rollout/ngram_proposer.h"

#include <algorithm>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"

namespace dapo::rollout {

void NgramProposer::Index::put(uint64_t key, Loc at) {
  if (2 * (count_ + 1) > keys_.size()) grow();
  key |= 1;
  const size_t mask = keys_.size() - 1;
  for (size_t i = size_t(mix64(key)) & mask;; i = (i + 1) & mask) {
    if (keys_[i] == 0) {
      keys_[i] = key;
      locs_[i] = at;
      ++count_;
      return;
    }
    if (keys_[i] == key) {
      locs_[i] = at;
      return;
    }
  }
}

const NgramProposer::Loc* NgramProposer::Index::find(uint64_t key) const {
  if (keys_.empty()) return nullptr;
  key |= 1;
  const size_t mask = keys_.size() - 1;
  for (size_t i = size_t(mix64(key)) & mask;; i = (i + 1) & mask) {
    if (keys_[i] == key) return &locs_[i];
    if (keys_[i] == 0) return nullptr;
  }
}

void NgramProposer::Index::grow() {
  std::vector<uint64_t> keys = std::move(keys_);
  std::vector<Loc> locs = std::move(locs_);
  keys_.assign(std::max<size_t>(64, 2 * keys.size()), 0);
  locs_.assign(keys_.size(), Loc{0, 0});
  count_ = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] != 0) put(keys[i], locs[i]);
}

NgramProposer::NgramProposer(int64_t min_n, int64_t max_n) : min_n_(min_n), max_n_(max_n) {
  DAPO_CHECK(min_n >= 1 && min_n <= max_n && max_n <= 8, "NgramProposer: n from ", min_n, " to ", max_n);
}

int64_t NgramProposer::add_group(std::span<const int32_t> prompt, int64_t samples) {
  DAPO_CHECK(samples >= 1, "NgramProposer: a group of ", samples, " samples");
  Group g;
  g.prompt.assign(prompt.begin(), prompt.end());
  g.responses.resize(size_t(samples));
  groups_.push_back(std::move(g));
  return int64_t(groups_.size()) - 1;
}

int32_t NgramProposer::token_of(const Group& g, int32_t source, int64_t index) const {
  const int64_t P = int64_t(g.prompt.size());
  if (source < 0 || index < P) return g.prompt[size_t(index)];
  return g.responses[size_t(source)][size_t(index - P)];
}

int64_t NgramProposer::text_length(const Group& g, int32_t source) const {
  return int64_t(g.prompt.size()) + (source < 0 ? 0 : int64_t(g.responses[size_t(source)].size()));
}

uint64_t NgramProposer::key_of(const Group& g, int32_t source, int64_t end, int64_t n) const {
  uint64_t h = stream_combine(kStreamHashInit, uint64_t(n));
  for (int64_t i = end - n; i < end; ++i) h = stream_combine(h, uint64_t(uint32_t(token_of(g, source, i))));
  return h;
}

void NgramProposer::index_follower(Group& g, int32_t source, int64_t index) {
  for (int64_t n = min_n_; n <= max_n_ && n <= index; ++n)
    g.follows.put(key_of(g, source, index, n), Loc{source, int32_t(index)});
}

// The prompt first, then the response tokens in the order they came: the
// index a group would have had from the start.
void NgramProposer::build_index(Group& g) {
  const int64_t P = int64_t(g.prompt.size());
  for (int64_t i = 1; i < P; ++i) index_follower(g, -1, i);
  for (const Loc& a : g.arrivals) index_follower(g, a.source, a.index);
  g.indexed = true;
}

void NgramProposer::append(int64_t gi, int64_t sample, int32_t token) {
  DAPO_CHECK(gi >= 0 && gi < int64_t(groups_.size()), "NgramProposer: no group ", gi);
  Group& g = groups_[size_t(gi)];
  DAPO_CHECK(sample >= 0 && sample < int64_t(g.responses.size()), "NgramProposer: no sample ", sample);
  g.responses[size_t(sample)].push_back(token);
  const Loc at{int32_t(sample), int32_t(text_length(g, int32_t(sample)) - 1)};
  g.arrivals.push_back(at);
  if (g.indexed) index_follower(g, at.source, at.index);
}

int64_t NgramProposer::propose(int64_t gi, int64_t sample, std::span<int32_t> out) {
  DAPO_CHECK(gi >= 0 && gi < int64_t(groups_.size()), "NgramProposer: no group ", gi);
  Group& g = groups_[size_t(gi)];
  DAPO_CHECK(sample >= 0 && sample < int64_t(g.responses.size()), "NgramProposer: no sample ", sample);
  if (out.empty()) return 0;
  const int32_t self = int32_t(sample);
  const int64_t L = text_length(g, self);
  if (!g.indexed) {
    // Answers that do not repeat themselves (a near-uniform model's) are not
    // worth indexing: a group's index (its whole text, in the step's
    // critical path) is built once one of its answers' last min_n tokens
    // occurred in its own last kProbeWindow tokens.
    if (!recent_repeat(g, self, L)) return 0;
    build_index(g);
  }
  for (int64_t n = std::min(max_n_, L); n >= min_n_; --n) {
    const Loc* found = g.follows.find(key_of(g, self, L, n));
    if (found == nullptr) continue;
    const Loc at = *found;
    const int64_t end = text_length(g, at.source);
    int64_t m = 0;
    for (int64_t i = at.index; i < end && m < int64_t(out.size()); ++i) out[size_t(m++)] = token_of(g, at.source, i);
    if (m > 0) return m;
  }
  return 0;
}

bool NgramProposer::recent_repeat(const Group& g, int32_t source, int64_t L) const {
  if (L <= min_n_) return false;
  for (int64_t end = L - 1; end >= std::max(min_n_, L - kProbeWindow); --end) {
    int64_t i = 0;
    while (i < min_n_ && token_of(g, source, end - 1 - i) == token_of(g, source, L - 1 - i)) ++i;
    if (i == min_n_) return true;
  }
  return false;
}

int64_t NgramProposer::indexed_groups() const {
  return std::count_if(groups_.begin(), groups_.end(), [](const Group& g) { return g.indexed; });
}

}  // namespace dapo::rollout
