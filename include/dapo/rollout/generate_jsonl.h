// The JSONL side of `dapo generate` (docs/DESIGN.md section 5): prompt lines in,
// the same lines with their responses out.
//
// Input: one JSON object per line (blank lines are skipped) with either
//   "prompt_ids": [ids]   token ids, used as is (wins when both are given), or
//   "prompt": "text"      encoded as is, no chat template, or
//   "prompt": [{"role", "content"}, ...]   chat messages: model.chat_template
//                         applied, ending with the generation prompt.
// Text prompts need a tokenizer; without one only prompt_ids lines work.
// Each prompt's uid (the sampler's key) is data::prompt_uid of its
// data_source (default: the file's stem) and extra_info.index (default: the
// 0-based ordinal of the record in the file), as for training data, so a
// prompt keeps its samples when lines are reordered or files split.
// A prompt longer than data.max_prompt_length follows data.truncation:
// left keeps its last tokens, error stops with FILE:LINE, skip leaves the
// line out of the output (counted in one warning).
//
// Output, in input order: the input object with every field kept in its
// order, plus "response_ids" (the sampled ids; an EOS ends them and is
// included), "response" (their text without special tokens; only with a
// tokenizer) and "finish_reason" ("eos" or "length"). With rollout.n > 1
// each input line gives n lines, samples 0..n-1 in order, each also with
// "sample_index".
//
// Errors: UserError "FILE:LINE: ..." for invalid JSON, a line that is not an
// object, a missing or mistyped prompt, prompt_ids that are not ids of the
// model's vocabulary, a text prompt without a tokenizer, an empty prompt.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/tokenizer.h"
#include "dapo/data/truncation.h"
#include "dapo/rollout/rollout_batch.h"

namespace dapo::rollout {

// How prompts become token ids.
struct PromptEncoding {
  const data::Tokenizer* tokenizer = nullptr;  // nullptr: prompt_ids only
  data::ChatFormat chat;
  int64_t vocab_size = 0;         // the model's: ids must be below it
  int64_t max_prompt_length = 0;  // data.max_prompt_length
  Truncation truncation = Truncation::left;
};

struct GenerateRecord {
  int64_t line = 0;             // 1-based line number in the input file
  std::string text;             // the line as read (written back with the responses added)
  uint64_t uid = 0;
  std::vector<int32_t> prompt_ids;  // after the chat template and truncation
  bool skipped = false;         // longer than max_prompt_length under truncation = skip
};

struct GenerateInput {
  std::vector<GenerateRecord> records;  // every non-blank line, in file order
  data::TruncationStats truncation;
  int64_t duplicate_uids = 0;           // records whose uid an earlier record has
  int64_t kept() const;                 // records not skipped
};

// Reads and encodes every line of `path`. Throws UserError (see above; also
// when the file cannot be read or holds no record).
GenerateInput read_generate_input(const std::string& path, const PromptEncoding& encoding);

// Writes the output lines of `input` to `out`. `batch` holds the kept
// records' prompts in input order, with their n responses each ordered by
// sample index (what GenerationEngine::generate returns for them).
// `tokenizer` (may be null) decodes "response"; ids it does not know (a
// model vocabulary larger than the tokenizer's) are left out of the text.
void write_generate_output(std::ostream& out, const GenerateInput& input, const RolloutBatch& batch, int64_t n,
                           const data::Tokenizer* tokenizer);

}  // namespace dapo::rollout
