// Draft tokens for the engine's exact speculative decoding (n-gram or
// prompt lookup: no draft model). A response's draft is what followed the
// latest earlier occurrence of its last n tokens (n from max_n down to
// min_n, the longest match first) in its prompt, in itself or in its
// group's other samples: reasoning traces repeat their own phrases, their
// problem's and their siblings'.
//
// The index of a group is built the first time one of its responses asks
// for a draft and has repeated itself lately (a round speculates only in
// its tail, when few sequences are left), then kept current as tokens
// arrive: a lookup is at most
// max_n - min_n + 1 hash probes, whatever the lengths. A hash collision
// only makes a draft that the target model rejects; a draft never changes
// what is sampled (rollout/scheduler.h).
//
// Deterministic: the same tokens appended in the same order give the same
// drafts (the latest occurrence by arrival wins, whether the index was built
// early or late).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dapo::rollout {

class NgramProposer {
 public:
  // 1 <= min_n <= max_n <= 8.
  NgramProposer(int64_t min_n = 2, int64_t max_n = 4);

  // Group g = the number of groups added before, of `samples` responses to
  // `prompt` (copied).
  int64_t add_group(std::span<const int32_t> prompt, int64_t samples);
  // `token` is the next token of response `sample` of group g.
  void append(int64_t g, int64_t sample, int32_t token);
  // Up to out.size() draft tokens for the next tokens of response `sample`
  // of group g, written to out; returns how many (0: no earlier occurrence).
  int64_t propose(int64_t g, int64_t sample, std::span<int32_t> out);

  int64_t indexed_groups() const;  // groups whose index was built

 private:
  // Where a token followed an n-gram: source -1 is the prompt, k >= 0 the
  // text prompt ++ response k; index is the token's place in that text.
  struct Loc {
    int32_t source;
    int32_t index;
  };
  // n-gram key -> its latest follower: open addressing with linear probes
  // (a group's index is built in the critical path of a step: ~10 ns an
  // insert where std::unordered_map took ~80).
  class Index {
   public:
    void put(uint64_t key, Loc at);
    const Loc* find(uint64_t key) const;

   private:
    void grow();
    std::vector<uint64_t> keys_;  // 0: empty (keys are made odd)
    std::vector<Loc> locs_;
    size_t count_ = 0;
  };
  struct Group {
    std::vector<int32_t> prompt;
    std::vector<std::vector<int32_t>> responses;
    std::vector<Loc> arrivals;  // (sample, text index) of every response token, in arrival order
    bool indexed = false;
    Index follows;
  };

  int32_t token_of(const Group& g, int32_t source, int64_t index) const;
  int64_t text_length(const Group& g, int32_t source) const;
  // The key of the n tokens of `source` ending before `end`.
  uint64_t key_of(const Group& g, int32_t source, int64_t end, int64_t n) const;
  // Records every n-gram that ends right before `index` of `source`.
  void index_follower(Group& g, int32_t source, int64_t index);
  void build_index(Group& g);
  // Whether the last min_n tokens of source's text (L tokens) occurred in
  // its last kProbeWindow tokens before.
  bool recent_repeat(const Group& g, int32_t source, int64_t L) const;
  static constexpr int64_t kProbeWindow = 512;

  int64_t min_n_, max_n_;
  std::vector<Group> groups_;
};

}  // namespace dapo::rollout
