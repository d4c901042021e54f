// The data.truncation policies and their counted warnings.
#include "dapo/data/truncation.h"

#include <algorithm>

#include "dapo/core/error.h"
#include "dapo/core/log.h"

namespace dapo::data {

TruncationOutcome apply_truncation(std::vector<int32_t>& ids, int64_t max_length, Truncation policy,
                                   const PromptRecord& record) {
  DAPO_CHECK(max_length > 0, "max_prompt_length ", max_length);
  const int64_t length = int64_t(ids.size());
  if (length <= max_length) return TruncationOutcome::kept;
  switch (policy) {
    case Truncation::left:
      ids.erase(ids.begin(), ids.begin() + (length - max_length));
      return TruncationOutcome::truncated;
    case Truncation::skip:
      return TruncationOutcome::skipped;
    case Truncation::error:
      throw UserError(cat(record.where(), ": prompt is ", length, " tokens, longer than data.max_prompt_length = ",
                          max_length, " (data.truncation = error; left truncates, skip drops such prompts)"));
  }
  DAPO_FAIL("unknown truncation policy ", int(policy));
}

void TruncationStats::add(TruncationOutcome outcome, int64_t length) {
  if (outcome == TruncationOutcome::kept) return;
  (outcome == TruncationOutcome::truncated ? truncated : skipped) += 1;
  longest = std::max(longest, length);
}

TruncationStats& TruncationStats::operator+=(const TruncationStats& other) {
  truncated += other.truncated;
  skipped += other.skipped;
  longest = std::max(longest, other.longest);
  return *this;
}

std::string TruncationStats::message(int64_t max_length, const std::string& period) const {
  const auto prompts = [](int64_t n) { return n == 1 ? "1 prompt" : cat(n, " prompts"); };
  std::string parts;
  if (truncated > 0) parts = cat("truncated ", prompts(truncated), " from the left");
  if (skipped > 0) parts += cat(parts.empty() ? "" : " and ", "skipped ", prompts(skipped));
  if (parts.empty()) return "";
  return cat(period, ": ", parts, " longer than ", max_length, " tokens (longest ", longest,
             "; data.max_prompt_length, data.truncation)");
}

void TruncationStats::report(int64_t max_length, const std::string& period) {
  if (any()) DAPO_WARN(message(max_length, period));
  *this = TruncationStats{};
}

}  // namespace dapo::data
