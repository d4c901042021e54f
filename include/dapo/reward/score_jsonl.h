// Scoring JSONL files of responses: the work behind `dapo verify`.
//
// Each non-blank line is a JSON object with "response" (string) and the
// reference in "ground_truth" or, as verl writes it, in
// "reward_model": {"ground_truth": ...} (a string or a number). The line is
// written back with "score" (+1/-1), "acc" (bool) and "pred" (the extracted
// answer) added; every other field passes through unchanged and in its
// order. Output lines keep the input order whatever the thread count.
//
// Errors (UserError, naming the source and the 1-based line): malformed
// JSON (a number beyond double's range included), a line that is not an
// object, a missing or mistyped field. Lines are processed in chunks, so
// memory stays bounded for any file size; each line goes through
// score_jsonl_line (jsonl_line.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "dapo/core/config.h"

namespace dapo::reward {

struct VerifySummary {
  int64_t responses = 0;
  int64_t correct = 0;
  double accuracy() const { return responses ? double(correct) / double(responses) : 0.0; }
};

// `threads` <= 0: all hardware threads. `verifier`: reward.verifier (verify.h).
VerifySummary verify_jsonl(std::istream& in, std::ostream& out, const std::string& source_name, int threads,
                           RewardVerifier verifier = RewardVerifier::symbolic);

}  // namespace dapo::reward
