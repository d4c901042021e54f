// Prompt datasets: JSONL files in verl's schema (or simple problem/answer
// lines) loaded into records that carry a stable prompt uid, the reference
// answer and where each record came from, so that every later error, dump
// and random draw can point back at one line of one file.
//
// Accepted line forms (one JSON object per line; empty lines are skipped):
//   verl:   {"data_source": "math_dapo",
//            "prompt": [{"role": "user", "content": "..."}],
//            "ability": "MATH",                          (ignored)
//            "reward_model": {"ground_truth": "34", "style": "..."},
//            "extra_info": {"index": "9a9b6eb4-..."}}    (string or integer)
//   raw:    as verl, but "prompt" is a string: the text is used as is, with
//           no chat template (docs/DESIGN.md section 5, `generate`).
//   simple: {"problem": "...", "answer": "..."}: the problem becomes one user
//           message, the answer the ground truth.
// `prompt` wins over `problem`, `reward_model.ground_truth` over `answer`.
// A JSON null counts as absent. Numeric ground truths and indices become
// their decimal text (an integral float such as 34.0, which pandas writes
// for integer columns holding a NaN, becomes "34"). Other fields are ignored.
//
// Errors: a line that is not a JSON object, or lacks a prompt or a ground
// truth, or has a field of the wrong type, an empty message list, a message
// without a role, an empty prompt or ground truth, is a UserError
// "FILE:LINE: field F: ...". What the ground truth says is not checked here:
// an answer the verifier cannot read is data, not an error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dapo::data {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...: not restricted here
  std::string content;
};

struct PromptRecord {
  // prompt_uid(data_source, index): the id the sampler keys its randomness on
  // (docs/DESIGN.md: (seed, step, prompt uid, sample index)) and the dump records.
  uint64_t uid = 0;
  std::string data_source;  // `data_source`; the file's stem when absent or empty
  // `extra_info.index` as text. It is a string, not an integer, because
  // DAPO-Math-17k's indices are UUIDs. Absent or empty: the 0-based ordinal
  // of the record among the records of its file (empty lines do not count).
  std::string index;
  std::vector<ChatMessage> messages;  // chat form: the chat template applies; empty for raw text
  std::string text;                   // raw form (`prompt` given as a string); empty for chat form
  std::string ground_truth;           // never empty
  std::string file;                   // the path as given to the loader
  int64_t line = 0;                   // 1-based line number in `file`

  bool is_chat() const { return !messages.empty(); }
  std::string where() const;  // "FILE:LINE", the prefix of every error about this record
};

// The stable uid of a prompt: a 64-bit hash of (data_source, index), each
// hashed whole (FNV-1a) and combined with core/rng.h's stream_combine, so
// ("ab", "c") and ("a", "bc") differ. It depends on neither the file name,
// nor the line, nor the order of the files: reordering, splitting or merging
// files keeps every prompt's samples the same. Part of the checkpoint and
// dump formats: changing it changes every sample of a resumed run.
uint64_t prompt_uid(std::string_view data_source, std::string_view index);

// Parses one non-empty line. `ordinal` is the record's 0-based position in
// its file (the index when the line has none); `default_source` the data
// source when the line has none. Throws UserError naming file:line.
PromptRecord parse_prompt_line(std::string_view line, const std::string& file, int64_t line_number,
                               int64_t ordinal, std::string_view default_source);

// All records of one JSONL file, in file order. Throws UserError when the
// file cannot be read, is a parquet file (with the conversion hint), holds
// no record, or has a malformed line.
std::vector<PromptRecord> load_prompt_file(const std::string& path);

// "a.jsonl, b.jsonl" -> {"a.jsonl", "b.jsonl"}: the form of data.train_files
// and data.val_files. Blanks around names are dropped; an empty name between
// commas is a UserError (`key` names the config key in the message).
std::vector<std::string> split_file_list(const std::string& list, const std::string& key);

// The records of several files, in the order of the files, with uids checked
// to be unique across all of them.
class PromptDataset {
 public:
  PromptDataset() = default;
  // Takes the records and checks their uids. A duplicate is a UserError naming
  // both places: the same (data_source, index) twice (e.g. a file listed
  // twice, or verl's 100x-repeated DAPO-Math file converted without dropping
  // repeats), or, with odds of about n^2 / 2^65, two keys whose hashes meet.
  explicit PromptDataset(std::vector<PromptRecord> records);

  // Loads every file of `paths` (see load_prompt_file).
  static PromptDataset load(const std::vector<std::string>& paths);
  // Loads a comma-separated list such as data.train_files (`key` names it in errors).
  static PromptDataset load_list(const std::string& list, const std::string& key);

  int64_t size() const { return int64_t(records_.size()); }
  bool empty() const { return records_.empty(); }
  const PromptRecord& operator[](int64_t i) const { return records_[size_t(i)]; }
  const std::vector<PromptRecord>& records() const { return records_; }
  // The position of the record with this uid, or -1.
  int64_t find(uint64_t uid) const;

 private:
  std::vector<PromptRecord> records_;
  std::unordered_map<uint64_t, int64_t> by_uid_;
};

}  // namespace dapo::data
