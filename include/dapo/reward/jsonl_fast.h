// The fast path of `dapo verify`: a strict scanner for one JSONL line that
// finds the fields the verifier needs and writes the line back byte for byte
// as nlohmann::ordered_json::parse(line).dump() would, without building a
// document. Parsing and re-serialising every line through nlohmann cost ~7x
// the verifier itself; this keeps the JSONL path near the verifier's speed.
//
// It is an accelerator, not a second JSON implementation to trust: whenever a
// line is malformed, mistyped, or merely unusual, scan() says no and the
// caller takes the nlohmann path (jsonl_line.h), which then produces the
// result or the exact error message. Its contract is one-sided: scan() never
// accepts a line that nlohmann rejects, and what it writes for an accepted
// line equals nlohmann's output (tests/reward/test_jsonl_fast.cpp compares
// both on a large random corpus).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dapo::reward {

// One scanner per thread; its buffers keep their capacity from line to line,
// so a warm scanner allocates nothing for lines no longer than earlier ones.
class JsonlLineScanner {
 public:
  // Scans `line`: one JSON object with optional JSON whitespace around it.
  // True when the object is well formed, has no duplicate key at any depth,
  // has a string "response", a reference that is a string or a number (the
  // top-level "ground_truth", else "reward_model": {"ground_truth": ...}),
  // and has none of the keys "score", "acc", "pred" (which the output
  // replaces in place, left to nlohmann). False otherwise, also for inputs
  // it does not bother with: nesting deeper than kMaxDepth, an object with
  // more than kMaxKeys keys, a number beyond double's range. Never throws
  // anything but std::bad_alloc.
  bool scan(std::string_view line);

  // Valid after scan() returned true (and until the next scan()):
  // the object as ordered_json::dump() writes it (compact, strings escaped
  // the nlohmann way, numbers in nlohmann's form), ending in '}';
  const std::string& canonical() const { return out_; }
  // the decoded "response" (UTF-8);
  const std::string& response() const { return response_; }
  // the decoded reference string, or a number's text as dump() writes it.
  const std::string& truth() const;

  static constexpr int kMaxDepth = 256;
  static constexpr size_t kMaxKeys = 64;  // per object: duplicate search is quadratic

 private:
  enum class Slot : uint8_t { other, response, truth, reward_model, rm_truth };
  enum class Where : uint8_t { top, reward_model, nested };
  enum class Found : uint8_t { none, value, mistyped };

  bool parse_value(int depth, Slot slot);
  bool parse_object(int depth, Where where);
  bool parse_array(int depth);
  bool parse_string(std::string* decoded);
  bool parse_escape();
  bool parse_number(std::string* text);
  bool parse_literal(std::string_view literal);
  void skip_whitespace();

  const char* p_ = nullptr;
  const char* end_ = nullptr;
  std::string out_;
  std::string response_, truth_, rm_truth_;
  Found response_found_ = Found::none, truth_found_ = Found::none, rm_truth_found_ = Found::none;
  // Decoded keys of the objects open on the current path, for the duplicate
  // check: (offset, length) into key_text_.
  std::string key_text_;
  std::vector<std::pair<uint32_t, uint32_t>> keys_;
};

// Appends `text` as a JSON string literal (quotes included) exactly as
// nlohmann's dump(-1, ' ', false, error_handler_t::replace) writes it: UTF-8
// kept as is, '"' '\\' and control characters escaped, invalid UTF-8 bytes
// replaced by U+FFFD the way nlohmann does it.
void append_json_string(std::string* out, std::string_view text);

// Appends a double as nlohmann's dump() writes it ("1.0", "-1.0", "0.25",
// "1e+100"; non-finite values as "null").
void append_json_double(std::string* out, double value);

}  // namespace dapo::reward
