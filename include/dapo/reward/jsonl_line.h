// Scoring one line of a `dapo verify` JSONL file (score_jsonl.h has the
// format): the fast scanner (jsonl_fast.h) where it accepts the line, the
// nlohmann document path otherwise. Both give the same bytes and the same
// errors; the nlohmann path stays callable so tests can hold the fast one to
// it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dapo/core/config.h"
#include "dapo/reward/jsonl_fast.h"

namespace dapo::reward {

// Parses `line` with nlohmann::ordered_json, verifies, sets "score", "acc"
// and "pred" (replacing them in place if present, else appended), dumps the
// object compactly into `*output` (replaced; no newline; must not be the
// storage of `line`) and returns the verdict's acc. Throws UserError
// "<source>:<line_number>: ..." for malformed JSON, a non-object, a missing
// or mistyped field; `*output` is unspecified then.
// `verifier`: reward.verifier (verify.h).
bool score_jsonl_line_nlohmann(std::string_view line, std::string_view source, int64_t line_number,
                               std::string* output, RewardVerifier verifier = RewardVerifier::symbolic);

// Same result as score_jsonl_line_nlohmann, through `scanner` when it accepts
// the line (the common case, several times faster). `scanner` is scratch
// space, one per thread; `*output` keeps its capacity, so a caller that
// reuses it allocates nothing per line on the fast path.
bool score_jsonl_line(std::string_view line, std::string_view source, int64_t line_number,
                      JsonlLineScanner* scanner, std::string* output,
                      RewardVerifier verifier = RewardVerifier::symbolic);

}  // namespace dapo::reward
