// Byte-level BPE merging: an open-addressing table of merge rules keyed by the
// id pair, two equivalent merge loops (small words: rescan an array of pair
// ranks; long words: a heap over a linked list), and the per-thread word cache.
#include "dapo/data/bpe_model.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "dapo/core/error.h"

namespace dapo::data {
namespace {

constexpr uint32_t kNoRank = ~uint32_t(0);

uint64_t load_tail(const char* p, size_t n) {
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return v;
}

uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

}  // namespace

// ---- word cache -------------------------------------------------------------

BpeWordCache::BpeWordCache() : slots_(kSlots, 0) {}

uint64_t BpeWordCache::hash(std::string_view w) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (w.size() * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= w.size(); i += 8) h = mix(h ^ load_tail(w.data() + i, 8)) * 0x9E3779B97F4A7C15ull;
  if (i < w.size()) h = mix(h ^ load_tail(w.data() + i, w.size() - i)) * 0x9E3779B97F4A7C15ull;
  return mix(h);
}

bool BpeWordCache::get(std::string_view word, uint64_t hash, std::vector<TokenId>& out) const {
  for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const uint32_t s = slots_[i];
    if (s == 0) return false;
    const Entry& e = entries_[s - 1];
    if (e.hash == hash && e.key_length == word.size() &&
        std::memcmp(keys_.data() + e.key_offset, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids_.begin() + e.ids_offset, ids_.begin() + e.ids_offset + e.ids_length);
      return true;
    }
  }
}

void BpeWordCache::put(std::string_view word, uint64_t hash, const TokenId* ids, size_t n) {
  if (word.size() > kMaxWordBytes) return;
  if (entries_.size() >= kMaxEntries) {  // start over rather than track recency
    std::fill(slots_.begin(), slots_.end(), 0);
    entries_.clear();
    keys_.clear();
    ids_.clear();
  }
  size_t i = hash & (kSlots - 1);
  while (slots_[i] != 0) i = (i + 1) & (kSlots - 1);
  entries_.push_back({hash, uint32_t(keys_.size()), uint32_t(ids_.size()), uint16_t(word.size()), uint16_t(n)});
  keys_.append(word);
  ids_.insert(ids_.end(), ids, ids + n);
  slots_[i] = uint32_t(entries_.size());
}

// ---- model ------------------------------------------------------------------

BpeModel::BpeModel() : table_(2, Slot{kEmpty, 0, 0}), mask_(1), shift_(63) { byte_ids_.fill(-1); }

BpeModel::BpeModel(const std::array<TokenId, 256>& byte_ids, std::span<const BpeMerge> merges, Options options,
                   std::unordered_map<std::string, TokenId> whole_words)
    : byte_ids_(byte_ids), options_(options), whole_words_(std::move(whole_words)) {
  size_t capacity = 2;
  int bits = 1;
  while (capacity < 2 * merges.size() + 2) {
    capacity *= 2;
    ++bits;
  }
  table_.assign(capacity, Slot{kEmpty, 0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - bits;
  for (size_t r = 0; r < merges.size(); ++r) {
    const BpeMerge& m = merges[r];
    DAPO_CHECK(m.left >= 0 && m.right >= 0 && m.result >= 0, "negative id in merge ", r);
    const uint64_t key = uint64_t(uint32_t(m.left)) << 32 | uint32_t(m.right);
    size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> shift_);
    while (table_[i].key != kEmpty && table_[i].key != key) i = (i + 1) & mask_;
    table_[i] = Slot{key, uint32_t(r), m.result};  // a repeated pair takes its later rank
  }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<TokenId>& symbols) const {
  symbols.clear();
  bool last_unknown = false;
  for (const char c : word) {
    const TokenId id = byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      symbols.push_back(id);
      last_unknown = false;
    } else if (options_.unk >= 0) {
      if (!(options_.fuse_unk && last_unknown)) symbols.push_back(options_.unk);
      last_unknown = true;
    }
  }
}

void BpeModel::merge_linear(std::vector<TokenId>& symbols) const {
  size_t n = symbols.size();
  if (n < 2) return;
  TokenId* ids = symbols.data();
  // ranks[i], results[i]: the pair (ids[i], ids[i + 1]); on the stack for short words.
  uint32_t rank_buf[kLinearMax];
  TokenId result_buf[kLinearMax];
  std::vector<uint32_t> rank_heap;
  std::vector<TokenId> result_heap;
  uint32_t* ranks = rank_buf;
  TokenId* results = result_buf;
  if (n - 1 > kLinearMax) {
    rank_heap.resize(n - 1);
    result_heap.resize(n - 1);
    ranks = rank_heap.data();
    results = result_heap.data();
  }
  auto rate = [&](size_t i) {
    if (!find_merge(ids[i], ids[i + 1], &ranks[i], &results[i])) ranks[i] = kNoRank;
  };
  for (size_t i = 0; i + 1 < n; ++i) rate(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;  // strict: the leftmost of equal ranks
    if (ranks[best] == kNoRank) break;
    ids[best] = results[best];
    // Drop symbol best + 1 and the pair that started at it.
    std::memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(TokenId));
    if (best + 2 < n) {
      std::memmove(ranks + best + 1, ranks + best + 2, (n - best - 3) * sizeof(uint32_t));
      std::memmove(results + best + 1, results + best + 2, (n - best - 3) * sizeof(TokenId));
    }
    --n;
    if (best + 1 < n) rate(best);
    if (best > 0) rate(best - 1);
  }
  symbols.resize(n);
}

void BpeModel::merge_heap(std::vector<TokenId>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  struct Candidate {
    uint32_t rank;
    uint32_t pos;  // index of the left symbol in the initial array
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  auto offer = [&](int32_t left) {
    if (left < 0 || next[size_t(left)] < 0) return;
    uint32_t rank;
    TokenId result;
    if (find_merge(symbols[size_t(left)], symbols[size_t(next[size_t(left)])], &rank, &result))
      heap.push({rank, uint32_t(left)});
  };
  for (size_t i = 0; i + 1 < n; ++i) offer(int32_t(i));
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const size_t p = top.pos;
    if (!alive[p] || next[p] < 0) continue;
    const size_t q = size_t(next[p]);
    uint32_t rank;
    TokenId result;
    // A stale candidate: one of its symbols has merged since it was offered.
    if (!find_merge(symbols[p], symbols[q], &rank, &result) || rank != top.rank) continue;
    symbols[p] = result;
    alive[q] = false;
    next[p] = next[q];
    if (next[q] >= 0) prev[size_t(next[q])] = int32_t(p);
    offer(prev[p]);
    offer(int32_t(p));
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) symbols[k++] = symbols[size_t(i)];
  symbols.resize(k);
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out, BpeWordCache* cache) const {
  if (word.empty()) return;
  if (word.size() == 1) {  // a single byte never merges
    const TokenId id = byte_ids_[static_cast<unsigned char>(word[0])];
    if (id >= 0) {
      out.push_back(id);
    } else if (options_.unk >= 0) {
      out.push_back(options_.unk);
    }
    return;
  }
  uint64_t h = 0;
  if (cache && word.size() <= BpeWordCache::kMaxWordBytes) {
    h = BpeWordCache::hash(word);
    if (cache->get(word, h, out)) return;
  }
  const size_t start = out.size();
  auto whole = options_.ignore_merges ? whole_words_.find(std::string(word)) : whole_words_.end();
  if (whole != whole_words_.end()) {
    out.push_back(whole->second);
  } else {
    std::vector<TokenId> symbols;
    symbols.reserve(word.size());
    initial_symbols(word, symbols);
    if (symbols.size() <= kLinearMax) {
      merge_linear(symbols);
    } else {
      merge_heap(symbols);
    }
    out.insert(out.end(), symbols.begin(), symbols.end());
  }
  if (cache && word.size() <= BpeWordCache::kMaxWordBytes) cache->put(word, h, out.data() + start, out.size() - start);
}

}  // namespace dapo::data
