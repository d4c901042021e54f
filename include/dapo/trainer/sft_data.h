// The supervised warm start's data (`dapo sft --data SFT.jsonl`): prompt /
// response pairs, tokenised into prompt ids and response ids.
//
// Accepted line forms (one JSON object per line; empty lines skipped;
// other fields ignored, so the demo's sft.jsonl - verl's prompt schema with
// a "response" - and generate's output both load):
//   {"prompt": [{"role": "user", "content": "..."}, ...], "response": "..."}
//       the chat template (model.chat_template) renders the messages with the
//       generation prompt; the response text is encoded and the EOS id
//       appended (<|im_end|> with chatml tokenizers);
//   {"prompt": "...", "response": "..."}
//       the prompt text is encoded as is (no template), as `dapo generate`
//       does; the response as above;
//   {"prompt_ids": [...], "response_ids": [...]}
//       token ids used as they are (no EOS added: include it yourself).
// "prompt_ids" wins over "prompt", "response_ids" over "response".
//
// Prompts longer than data.max_prompt_length follow data.truncation
// (data/truncation.h: left keeps the end, skip drops the pair, error stops).
//
// Errors (UserError "FILE:LINE: ..."): invalid JSON or not an object, a
// missing or ill-typed prompt/response, an empty prompt or response, an id
// outside [0, vocab_size), text without a tokenizer, a pair longer than the
// model's max_position_embeddings; a file that cannot be read or holds no
// pair ("FILE: ...").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/tokenizer.h"
#include "dapo/data/truncation.h"

namespace dapo::trainer {

struct SftExample {
  std::vector<int32_t> prompt_ids;    // P >= 1 tokens, ending with the generation prompt
  std::vector<int32_t> response_ids;  // R >= 1 tokens, EOS included (text form)
  std::string where;                  // "FILE:LINE"
};

struct SftEncoding {
  const data::Tokenizer* tokenizer = nullptr;  // nullptr: only the *_ids form is accepted
  data::ChatFormat chat;
  int32_t eos_id = -1;                 // appended to text responses; -1: none
  int64_t vocab_size = 0;              // the model's: ids must lie in [0, vocab_size)
  int64_t max_positions = 0;           // the model's max_position_embeddings; 0: no limit
  int64_t max_prompt_length = 2048;    // data.max_prompt_length
  Truncation truncation = Truncation::left;
};

// The EOS of text responses: the tokenizer's <|im_end|> / <|endoftext|>
// (data::eos_token_ids' first), else the model's first eos_token_id, else -1.
int32_t sft_eos_id(const data::Tokenizer* tokenizer, const std::vector<int64_t>& model_eos_ids);

// One non-empty line. Returns false when data.truncation = skip drops it.
bool parse_sft_line(const std::string& line, const std::string& file, int64_t line_number, const SftEncoding& enc,
                    SftExample& out, data::TruncationStats& stats);

// Every pair of `path`, in file order (skipped ones left out).
std::vector<SftExample> load_sft_file(const std::string& path, const SftEncoding& enc,
                                      data::TruncationStats& stats);

}  // namespace dapo::trainer
