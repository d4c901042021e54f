// Reading and tokenising prompt/response pairs for `dapo sft`.
#include "dapo/trainer/sft_data.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "dapo/core/error.h"
#include "dapo/core/text_lines.h"
#include "dapo/core/json_text.h"

namespace dapo::trainer {
namespace {

using nlohmann::json;

struct Line {
  const std::string& file;
  int64_t number;
  [[noreturn]] void fail(const std::string& msg) const { throw UserError(cat(file, ":", number, ": ", msg)); }
  std::string where() const { return cat(file, ":", number); }
};

const json* field(const json& doc, const char* name) {
  const auto it = doc.find(name);
  return it == doc.end() || it->is_null() ? nullptr : &*it;
}

std::vector<int32_t> read_ids(const json& v, const char* name, const SftEncoding& enc, const Line& line) {
  if (!v.is_array()) line.fail(cat("field ", name, ": expected a list of token ids, got ", v.type_name()));
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& x = v[i];
    if (!x.is_number_integer()) line.fail(cat("field ", name, "[", i, "]: expected an integer token id, got ", x.dump()));
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= enc.vocab_size)
      line.fail(cat("field ", name, "[", i, "]: token id ", id, " is outside the model's vocabulary [0, ",
                    enc.vocab_size, ")"));
    ids.push_back(int32_t(id));
  }
  return ids;
}

const data::Tokenizer& need_tokenizer(const SftEncoding& enc, const char* name, const Line& line) {
  if (!enc.tokenizer)
    line.fail(cat("field ", name, " is text, but there is no tokenizer (set model.tokenizer, or give ", name,
                  "_ids)"));
  return *enc.tokenizer;
}

void check_vocab(const std::vector<int32_t>& ids, const char* name, const SftEncoding& enc, const Line& line) {
  for (const int32_t id : ids)
    if (id >= enc.vocab_size)
      line.fail(cat("field ", name, ": the tokenizer gives id ", id, ", outside the model's vocabulary [0, ",
                    enc.vocab_size, ")"));
}

std::vector<int32_t> prompt_ids_of(const json& doc, const SftEncoding& enc, const Line& line) {
  if (const json* ids = field(doc, "prompt_ids")) return read_ids(*ids, "prompt_ids", enc, line);
  const json* p = field(doc, "prompt");
  if (!p) line.fail("no prompt: expected field prompt (chat messages or text) or prompt_ids");
  std::vector<int32_t> ids;
  if (p->is_string()) {
    ids = need_tokenizer(enc, "prompt", line).encode(p->get<std::string>());
  } else if (p->is_array()) {
    std::vector<data::ChatMessage> messages;
    for (size_t i = 0; i < p->size(); ++i) {
      const json& m = (*p)[i];
      const json* role = m.is_object() ? field(m, "role") : nullptr;
      const json* content = m.is_object() ? field(m, "content") : nullptr;
      if (!role || !role->is_string() || !content || !content->is_string())
        line.fail(cat("field prompt[", i, "]: expected {\"role\": text, \"content\": text}"));
      messages.push_back({role->get<std::string>(), content->get<std::string>()});
    }
    if (messages.empty()) line.fail("field prompt: empty list of chat messages");
    ids = data::encode_chat(need_tokenizer(enc, "prompt", line), messages, enc.chat, true, line.where());
  } else {
    line.fail(cat("field prompt: expected chat messages (a list) or text, got ", p->type_name()));
  }
  check_vocab(ids, "prompt", enc, line);
  return ids;
}

std::vector<int32_t> response_ids_of(const json& doc, const SftEncoding& enc, const Line& line) {
  if (const json* ids = field(doc, "response_ids")) return read_ids(*ids, "response_ids", enc, line);
  const json* r = field(doc, "response");
  if (!r) line.fail("no response: expected field response (text) or response_ids");
  if (!r->is_string()) line.fail(cat("field response: expected text, got ", r->type_name()));
  std::vector<int32_t> ids = need_tokenizer(enc, "response", line).encode(r->get<std::string>());
  if (enc.eos_id >= 0) ids.push_back(enc.eos_id);
  check_vocab(ids, "response", enc, line);
  return ids;
}

}  // namespace

int32_t sft_eos_id(const data::Tokenizer* tokenizer, const std::vector<int64_t>& model_eos_ids) {
  if (tokenizer) {
    const std::vector<data::TokenId> ids = data::eos_token_ids(*tokenizer);
    if (!ids.empty()) return ids.front();
  }
  return model_eos_ids.empty() ? -1 : int32_t(model_eos_ids.front());
}

bool parse_sft_line(const std::string& text, const std::string& file, int64_t line_number, const SftEncoding& enc,
                    SftExample& out, data::TruncationStats& stats) {
  const Line line{file, line_number};
  refuse_nul_byte(text, line.where());
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    const std::string what = e.what();
    const size_t at = what.find("column ");
    line.fail(cat("invalid JSON: ", at == std::string::npos ? what : what.substr(at)));
  }
  if (!doc.is_object()) line.fail(cat("expected a JSON object, got ", doc.type_name()));
  out.prompt_ids = prompt_ids_of(doc, enc, line);
  out.response_ids = response_ids_of(doc, enc, line);
  out.where = line.where();
  if (out.prompt_ids.empty()) line.fail("empty prompt (no token)");
  if (out.response_ids.empty()) line.fail("empty response (no token)");
  data::PromptRecord record;  // names the line in truncation messages
  record.file = file;
  record.line = line_number;
  const int64_t length = int64_t(out.prompt_ids.size());
  const data::TruncationOutcome outcome =
      data::apply_truncation(out.prompt_ids, enc.max_prompt_length, enc.truncation, record);
  stats.add(outcome, length);
  if (outcome == data::TruncationOutcome::skipped) return false;
  const int64_t total = int64_t(out.prompt_ids.size() + out.response_ids.size());
  if (enc.max_positions > 0 && total > enc.max_positions)
    line.fail(cat("prompt + response is ", total, " tokens, more than the model's max_position_embeddings = ",
                  enc.max_positions));
  return true;
}

std::vector<SftExample> load_sft_file(const std::string& path, const SftEncoding& enc,
                                      data::TruncationStats& stats) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(cat(path, ": cannot open the SFT data file"));
  std::vector<SftExample> out;
  std::string text;
  int64_t number = 0, lines = 0;
  while (read_bounded_line(in, text, path, number)) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    ++lines;
    SftExample ex;
    if (parse_sft_line(text, path, number, enc, ex, stats)) out.push_back(std::move(ex));
  }
  if (in.bad()) throw UserError(cat(path, ": read error"));
  if (lines == 0) throw UserError(cat(path, ": no prompt/response pair in the file"));
  if (out.empty()) throw UserError(cat(path, ": all ", lines, " pairs were skipped (data.truncation = skip)"));
  return out;
}

}  // namespace dapo::trainer
