// data.truncation: left keeps the last tokens, error names file:line and
// length, skip leaves the ids for the caller to drop; the counted warning.
#include "dapo/data/truncation.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::data {
namespace {

PromptRecord record_at(const std::string& file, int64_t line) {
  PromptRecord r;
  r.file = file;
  r.line = line;
  return r;
}

std::vector<int32_t> iota_ids(int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = 100 + i;
  return ids;
}

TEST(Truncation, ShortAndExactLengthsAreKeptByEveryPolicy) {
  const PromptRecord r = record_at("a.jsonl", 1);
  for (const Truncation policy : {Truncation::left, Truncation::error, Truncation::skip}) {
    for (const int n : {0, 1, 4, 5}) {
      std::vector<int32_t> ids = iota_ids(n);
      EXPECT_EQ(apply_truncation(ids, 5, policy, r), TruncationOutcome::kept);
      EXPECT_EQ(ids, iota_ids(n));
    }
  }
}

TEST(Truncation, LeftKeepsTheLastTokens) {
  std::vector<int32_t> ids = iota_ids(8);
  EXPECT_EQ(apply_truncation(ids, 5, Truncation::left, record_at("a.jsonl", 1)), TruncationOutcome::truncated);
  EXPECT_EQ(ids, (std::vector<int32_t>{103, 104, 105, 106, 107}));
  std::vector<int32_t> one_over = iota_ids(6);
  EXPECT_EQ(apply_truncation(one_over, 5, Truncation::left, record_at("a.jsonl", 1)), TruncationOutcome::truncated);
  EXPECT_EQ(one_over.front(), 101);
  std::vector<int32_t> to_one = iota_ids(3);
  apply_truncation(to_one, 1, Truncation::left, record_at("a.jsonl", 1));
  EXPECT_EQ(to_one, (std::vector<int32_t>{102}));
}

TEST(Truncation, SkipLeavesTheIdsAlone) {
  std::vector<int32_t> ids = iota_ids(6);
  EXPECT_EQ(apply_truncation(ids, 5, Truncation::skip, record_at("a.jsonl", 1)), TruncationOutcome::skipped);
  EXPECT_EQ(ids, iota_ids(6));
}

TEST(Truncation, ErrorNamesFileLineAndLength) {
  std::vector<int32_t> ids = iota_ids(2049);
  try {
    apply_truncation(ids, 2048, Truncation::error, record_at("data/dapo-math-17k.jsonl", 1234));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "data/dapo-math-17k.jsonl:1234: prompt is 2049 tokens, longer than data.max_prompt_length = 2048 "
                 "(data.truncation = error; left truncates, skip drops such prompts)");
  }
  EXPECT_EQ(ids.size(), 2049u);
}

TEST(Truncation, StatsCountAndReportOnce) {
  TruncationStats stats;
  EXPECT_FALSE(stats.any());
  EXPECT_EQ(stats.message(2048, "epoch 0"), "");
  stats.add(TruncationOutcome::kept, 100);
  EXPECT_FALSE(stats.any());
  stats.add(TruncationOutcome::skipped, 3101);
  EXPECT_EQ(stats.message(2048, "epoch 3"),
            "epoch 3: skipped 1 prompt longer than 2048 tokens (longest 3101; data.max_prompt_length, data.truncation)");
  stats.add(TruncationOutcome::skipped, 2500);
  EXPECT_EQ(stats.skipped, 2);
  EXPECT_EQ(stats.longest, 3101);
  EXPECT_EQ(stats.message(2048, "epoch 3"),
            "epoch 3: skipped 2 prompts longer than 2048 tokens (longest 3101; data.max_prompt_length, data.truncation)");

  TruncationStats other;  // e.g. another dp rank's counts
  other.add(TruncationOutcome::truncated, 4000);
  other.add(TruncationOutcome::truncated, 2049);
  other.add(TruncationOutcome::truncated, 2049);
  stats += other;
  EXPECT_EQ(stats.truncated, 3);
  EXPECT_EQ(stats.skipped, 2);
  EXPECT_EQ(stats.longest, 4000);
  EXPECT_EQ(stats.message(2048, "loading data.train_files"),
            "loading data.train_files: truncated 3 prompts from the left and skipped 2 prompts longer than 2048 "
            "tokens (longest 4000; data.max_prompt_length, data.truncation)");

  testing::internal::CaptureStderr();
  stats.report(2048, "epoch 3");
  const std::string logged = testing::internal::GetCapturedStderr();
  EXPECT_NE(logged.find("warn] epoch 3: truncated 3 prompts from the left and skipped 2 prompts"), std::string::npos)
      << logged;
  EXPECT_EQ(std::count(logged.begin(), logged.end(), '\n'), 1);  // one line, not one per prompt
  EXPECT_FALSE(stats.any());  // reset for the next epoch
  EXPECT_EQ(stats.longest, 0);

  testing::internal::CaptureStderr();
  stats.report(2048, "epoch 4");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // nothing to report, nothing logged
}

TEST(Truncation, ApplyAndCountTogether) {
  // The loop a loader runs: apply the policy, count, drop the skipped.
  std::vector<std::vector<int32_t>> prompts = {iota_ids(3), iota_ids(9), iota_ids(5), iota_ids(12)};
  TruncationStats stats;
  std::vector<std::vector<int32_t>> kept;
  for (auto& ids : prompts) {
    const int64_t length = int64_t(ids.size());
    const TruncationOutcome outcome = apply_truncation(ids, 5, Truncation::skip, record_at("x.jsonl", 1));
    stats.add(outcome, length);
    if (outcome != TruncationOutcome::skipped) kept.push_back(ids);
  }
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_EQ(stats.skipped, 2);
  EXPECT_EQ(stats.truncated, 0);
  EXPECT_EQ(stats.longest, 12);
}

}  // namespace
}  // namespace dapo::data
