// The n-gram drafts of exact speculative decoding: what followed the
// latest earlier occurrence of a response's last n tokens, in its prompt,
// itself or its siblings, the longest n first; an index built late equals
// one kept from the start; no draft without an earlier occurrence.
#include "dapo/rollout/ngram_proposer.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace dapo::rollout {
namespace {

std::vector<int32_t> draft_of(NgramProposer& p, int64_t g, int64_t sample, size_t max) {
  std::vector<int32_t> out(max);
  out.resize(size_t(p.propose(g, sample, out)));
  return out;
}

void append_all(NgramProposer& p, int64_t g, int64_t sample, const std::vector<int32_t>& tokens) {
  for (const int32_t t : tokens) p.append(g, sample, t);
}

TEST(NgramProposer, DraftsWhatFollowedTheLatestOccurrence) {
  NgramProposer p(2, 4);
  const int64_t g = p.add_group(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 2);
  EXPECT_EQ(g, 0);
  // From the prompt: "... 5 6" never occurred before its end -> nothing;
  // after "2 3" the prompt went on with 4 5 6 (and ends there).
  EXPECT_TRUE(draft_of(p, g, 0, 4).empty());
  append_all(p, g, 0, {9, 2, 3});
  EXPECT_EQ(draft_of(p, g, 0, 4), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(draft_of(p, g, 0, 2), (std::vector<int32_t>{4, 5}));  // at most what is asked
  // The latest occurrence wins: "2 3" is followed by 7 in response 0 now.
  append_all(p, g, 0, {7, 8, 2, 3});
  EXPECT_EQ(draft_of(p, g, 0, 3), (std::vector<int32_t>{7, 8, 2}));
  // A sibling's text counts: response 1 ends with "8 2", which response 0
  // followed with its last token, 3.
  append_all(p, g, 1, {8, 2});
  EXPECT_EQ(draft_of(p, g, 1, 3), (std::vector<int32_t>{3}));
  // The longest match first: response 1 now ends "5 7 8 2"; "8 2" last
  // came in response 1 itself (-> 5), "7 8 2" in response 0 (-> 3).
  append_all(p, g, 1, {5, 7, 8, 2});
  EXPECT_EQ(draft_of(p, g, 1, 1), (std::vector<int32_t>{3}));
  // Another group knows nothing of this one, and a text that never
  // repeated itself is not even indexed.
  const int64_t h = p.add_group(std::vector<int32_t>{40, 41}, 1);
  append_all(p, h, 0, {2, 3});
  EXPECT_TRUE(draft_of(p, h, 0, 4).empty());
  EXPECT_EQ(p.indexed_groups(), 1);
  append_all(p, h, 0, {40, 41});
  EXPECT_EQ(draft_of(p, h, 0, 4), (std::vector<int32_t>{2, 3, 40, 41}));
  EXPECT_EQ(p.indexed_groups(), 2);
}

// Built from the history at the first request or kept current from the
// start: the same drafts, over random texts with many repeats.
TEST(NgramProposer, ALateIndexEqualsAnEarlyOne) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> tok(0, 5);
  std::vector<int32_t> prompt(20);
  for (int32_t& t : prompt) t = tok(gen);
  NgramProposer early(1, 3), late(1, 3);
  early.add_group(prompt, 3);
  late.add_group(prompt, 3);
  std::vector<int32_t> out(1);
  early.propose(0, 0, out);  // builds the index now
  for (int step = 0; step < 300; ++step) {
    const int64_t k = step % 3;
    const int32_t t = tok(gen);
    early.append(0, k, t);
    late.append(0, k, t);
  }
  for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(draft_of(early, 0, k, 6), draft_of(late, 0, k, 6)) << k;
}

}  // namespace
}  // namespace dapo::rollout
