// What happens to a prompt longer than data.max_prompt_length tokens
// (data.truncation): `left` keeps its last max tokens (as verl's
// truncation="left": the end of the prompt, where the question and the
// generation prompt sit, survives), `error` stops the run naming the
// prompt's file and line, `skip` drops the prompt. Truncations and skips are
// counted and reported as one warning line per kind, not one per prompt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/dataset.h"

namespace dapo::data {

enum class TruncationOutcome { kept, truncated, skipped };

// Applies `policy` to the token ids of `record`'s prompt (after the chat
// template): ids.size() <= max_length -> kept, ids untouched; longer and
// left -> truncated, ids keep their last max_length; longer and skip ->
// skipped, ids untouched (the caller drops the prompt); longer and error ->
// UserError "FILE:LINE: prompt is N tokens, longer than
// data.max_prompt_length = M (data.truncation = error)". max_length > 0.
TruncationOutcome apply_truncation(std::vector<int32_t>& ids, int64_t max_length, Truncation policy,
                                   const PromptRecord& record);

// Counts of one reporting period (an epoch, or the loading of a file set).
// Plain integers, so the trainer can sum them over dp ranks (operator+=)
// before rank 0 reports them.
struct TruncationStats {
  int64_t truncated = 0;
  int64_t skipped = 0;
  int64_t longest = 0;  // tokens of the longest prompt that was truncated or skipped

  // Records one prompt of `length` tokens (before truncation).
  void add(TruncationOutcome outcome, int64_t length);
  TruncationStats& operator+=(const TruncationStats& other);
  bool any() const { return truncated > 0 || skipped > 0; }

  // The warning text, "" when nothing was truncated or skipped, e.g.
  // "epoch 3: skipped 12 prompts longer than 2048 tokens (longest 3101;
  // data.max_prompt_length, data.truncation)".
  std::string message(int64_t max_length, const std::string& period) const;
  // Logs message() once through DAPO_WARN (when any()) and resets the counts.
  void report(int64_t max_length, const std::string& period);
};

}  // namespace dapo::data
