// The byte-level BPE model: the merges of a tokenizer.json applied by rank to
// the bytes of one pre-tokenized word, as HF tokenizers' BPE does (lowest
// rank first, leftmost first among equal ranks), plus a per-thread cache of
// whole words. Internal to the data module (Tokenizer owns one); public so
// that tests can check the merge algorithms against each other.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dapo::data {

using TokenId = int32_t;

// One merge rule: left + right -> result. Its rank is its index in the list.
struct BpeMerge {
  TokenId left = 0;
  TokenId right = 0;
  TokenId result = 0;
};

// Cache of word -> ids for one thread. Bounded: when full it starts over,
// which costs one re-merge per word and keeps memory flat (~8 MB at most).
class BpeWordCache {
 public:
  BpeWordCache();
  // Appends the cached ids of `word` to `out` and returns true, or false.
  bool get(std::string_view word, uint64_t hash, std::vector<TokenId>& out) const;
  void put(std::string_view word, uint64_t hash, const TokenId* ids, size_t n);
  size_t size() const { return entries_.size(); }
  static uint64_t hash(std::string_view word);

  static constexpr size_t kMaxWordBytes = 256;  // longer words are not cached

 private:
  struct Entry {
    uint64_t hash;
    uint32_t key_offset;
    uint32_t ids_offset;
    uint16_t key_length;
    uint16_t ids_length;
  };
  static constexpr size_t kSlots = size_t(1) << 17;
  static constexpr size_t kMaxEntries = kSlots / 2;
  std::vector<uint32_t> slots_;  // index into entries_ + 1; 0: empty
  std::vector<Entry> entries_;
  std::string keys_;
  std::vector<TokenId> ids_;
};

class BpeModel {
 public:
  struct Options {
    TokenId unk = -1;            // id of unk_token; -1: bytes without a token are dropped (as HF)
    bool fuse_unk = false;       // consecutive unknown bytes become one unk
    bool ignore_merges = false;  // a word that is a token as a whole is that token
  };

  BpeModel();  // no merges, no byte tokens
  // byte_ids[b]: the token of the single byte b (-1: none). merges in rank
  // order; a pair listed twice keeps its later rank (HF builds a map).
  // whole_words: raw bytes -> id of every token (used with ignore_merges).
  BpeModel(const std::array<TokenId, 256>& byte_ids, std::span<const BpeMerge> merges, Options options,
           std::unordered_map<std::string, TokenId> whole_words);

  // Appends the ids of `word` (raw bytes) to `out`; with `cache`, looks the
  // word up there first and stores it after merging.
  void encode_word(std::string_view word, std::vector<TokenId>& out, BpeWordCache* cache = nullptr) const;

  // The two merge loops, exposed for tests: `linear` rescans a small array of
  // pair ranks (fast for short words), `heap` keeps a priority queue over a
  // linked list (for long words). Both take the initial symbols.
  void merge_linear(std::vector<TokenId>& symbols) const;
  void merge_heap(std::vector<TokenId>& symbols) const;

  // rank and result of merging (left, right); false when no rule applies.
  bool find_merge(TokenId left, TokenId right, uint32_t* rank, TokenId* result) const {
    const uint64_t key = uint64_t(uint32_t(left)) << 32 | uint32_t(right);
    size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> shift_);
    for (;;) {
      const Slot& s = table_[i];
      if (s.key == key) {
        *rank = s.rank;
        *result = s.result;
        return true;
      }
      if (s.key == kEmpty) return false;
      i = (i + 1) & mask_;
    }
  }

  // Words of at most this many symbols use merge_linear.
  static constexpr size_t kLinearMax = 48;

 private:
  struct Slot {
    uint64_t key;
    uint32_t rank;
    TokenId result;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  void initial_symbols(std::string_view word, std::vector<TokenId>& symbols) const;

  std::array<TokenId, 256> byte_ids_{};
  Options options_;
  std::unordered_map<std::string, TokenId> whole_words_;
  std::vector<Slot> table_;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace dapo::data
