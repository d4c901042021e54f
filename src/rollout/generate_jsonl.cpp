// Parsing `dapo generate` input lines into token ids, and writing them back
// with their responses (generate_jsonl.h).
#include "dapo/rollout/generate_jsonl.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <unordered_set>

#include "dapo/core/error.h"
#include "dapo/core/text_lines.h"
#include "dapo/core/json_text.h"
#include "dapo/data/dataset.h"

namespace dapo::rollout {
namespace {

using Json = nlohmann::ordered_json;

struct Line {
  const std::string& file;
  int64_t number;
  [[noreturn]] void fail(const std::string& message) const { throw UserError(cat(file, ":", number, ": ", message)); }
  [[noreturn]] void wrong_type(const std::string& field, const char* expected, const Json& got) const {
    fail(cat("field ", field, ": expected ", expected, ", got ", got.type_name()));
  }
};

const Json* member(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::vector<int32_t> parse_ids(const Line& line, const Json& ids, int64_t vocab_size) {
  if (!ids.is_array()) line.wrong_type("prompt_ids", "a list of token ids", ids);
  if (ids.empty()) line.fail("field prompt_ids: empty prompt");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& v = ids[i];
    if (!v.is_number_integer()) line.wrong_type(cat("prompt_ids[", i, "]"), "an integer token id", v);
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() < uint64_t(vocab_size)
                                                 : v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab_size;
    if (!in_range)
      line.fail(cat("field prompt_ids[", i, "]: ", v.dump(), " is not a token id of the model (0..", vocab_size - 1,
                    ")"));
    out.push_back(int32_t(v.get<int64_t>()));
  }
  return out;
}

std::vector<data::ChatMessage> parse_messages(const Line& line, const Json& prompt) {
  if (prompt.empty()) line.fail("field prompt: empty list of messages");
  std::vector<data::ChatMessage> messages;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const Json& m = prompt[i];
    const std::string at = cat("prompt[", i, "]");
    if (!m.is_object()) line.wrong_type(at, "a message {\"role\", \"content\"}", m);
    const Json* role = member(m, "role");
    const Json* content = member(m, "content");
    if (!role) line.fail(cat("field ", at, ".role: missing"));
    if (!role->is_string()) line.wrong_type(at + ".role", "a string", *role);
    if (!content) line.fail(cat("field ", at, ".content: missing"));
    if (!content->is_string()) line.wrong_type(at + ".content", "a string", *content);
    messages.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return messages;
}

std::vector<int32_t> encode_prompt(const Line& line, const Json& doc, const PromptEncoding& enc) {
  if (const Json* ids = member(doc, "prompt_ids")) return parse_ids(line, *ids, enc.vocab_size);
  const Json* prompt = member(doc, "prompt");
  if (!prompt) line.fail("missing prompt: expected field prompt_ids (token ids) or prompt (text or chat messages)");
  if (!prompt->is_string() && !prompt->is_array())
    line.wrong_type("prompt", "a string or a list of chat messages", *prompt);
  if (!enc.tokenizer)
    line.fail("field prompt: a text prompt needs a tokenizer (model.tokenizer, or tokenizer.json beside the model); "
              "without one give prompt_ids");
  std::vector<int32_t> ids;
  if (prompt->is_string()) {
    ids = enc.tokenizer->encode(prompt->get_ref<const std::string&>());
  } else {
    ids = data::encode_chat(*enc.tokenizer, parse_messages(line, *prompt), enc.chat, true,
                            cat(line.file, ":", line.number));
  }
  if (ids.empty()) line.fail("field prompt: empty prompt");
  for (const int32_t id : ids)
    if (id < 0 || id >= enc.vocab_size)
      line.fail(cat("field prompt: the tokenizer gives id ", id, ", outside the model's vocabulary (0..",
                    enc.vocab_size - 1, "): does ", enc.tokenizer->source(), " belong to this model?"));
  return ids;
}

// extra_info.index as text (dataset.h): a string as is, an integer (or an
// integral float) as its decimal digits; "" when absent.
std::string index_text(const Line& line, const Json& doc) {
  const Json* extra = member(doc, "extra_info");
  if (!extra) return "";
  if (!extra->is_object()) line.wrong_type("extra_info", "an object", *extra);
  const Json* index = member(*extra, "index");
  if (!index) return "";
  if (index->is_string()) return index->get<std::string>();
  if (index->is_number_integer())
    return index->is_number_unsigned() ? std::to_string(index->get<uint64_t>()) : std::to_string(index->get<int64_t>());
  if (index->is_number_float()) {
    const double d = index->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9007199254740992.0) return std::to_string(int64_t(d));
  }
  line.wrong_type("extra_info.index", "a string or an integer", *index);
}

std::string source_text(const Line& line, const Json& doc) {
  const Json* source = member(doc, "data_source");
  if (!source) return "";
  if (!source->is_string()) line.wrong_type("data_source", "a string", *source);
  return source->get<std::string>();
}

}  // namespace

int64_t GenerateInput::kept() const {
  int64_t n = 0;
  for (const GenerateRecord& r : records) n += r.skipped ? 0 : 1;
  return n;
}

GenerateInput read_generate_input(const std::string& path, const PromptEncoding& enc) {
  DAPO_CHECK(enc.vocab_size > 0 && enc.max_prompt_length > 0, "PromptEncoding: vocab_size ", enc.vocab_size,
             ", max_prompt_length ", enc.max_prompt_length);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(cat(path, ": is a directory, not a JSONL file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(cat(path, ": cannot open the input file"));
  const std::string stem = std::filesystem::path(path).stem().string();
  GenerateInput input;
  std::unordered_set<uint64_t> uids;
  std::string text;
  for (int64_t number = 0; read_bounded_line(in, text, path, number);) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const Line line{path, number};
    refuse_nul_byte(text, cat(path, ":", number));
    Json doc;
    try {
      doc = Json::parse(text);
    } catch (const Json::parse_error& e) {
      const std::string what = e.what();
      const size_t at = what.find("column ");
      line.fail(cat("invalid JSON: ", at == std::string::npos ? what : what.substr(at)));
    }
    if (!doc.is_object()) line.fail(cat("expected a JSON object, got ", doc.type_name()));
    GenerateRecord r;
    r.line = number;
    r.prompt_ids = encode_prompt(line, doc, enc);
    std::string source = source_text(line, doc), index = index_text(line, doc);
    if (source.empty()) source = stem;
    if (index.empty()) index = std::to_string(input.records.size());
    r.uid = data::prompt_uid(source, index);
    if (!uids.insert(r.uid).second) ++input.duplicate_uids;
    data::PromptRecord where;
    where.file = path;
    where.line = number;
    const int64_t length = int64_t(r.prompt_ids.size());
    const data::TruncationOutcome outcome =
        data::apply_truncation(r.prompt_ids, enc.max_prompt_length, enc.truncation, where);
    input.truncation.add(outcome, length);
    r.skipped = outcome == data::TruncationOutcome::skipped;
    r.text = std::move(text);
    input.records.push_back(std::move(r));
  }
  if (in.bad()) throw UserError(cat(path, ": read error"));
  if (input.records.empty()) throw UserError(cat(path, ": no prompt in the file"));
  return input;
}

void write_generate_output(std::ostream& out, const GenerateInput& input, const RolloutBatch& batch, int64_t n,
                           const data::Tokenizer* tokenizer) {
  DAPO_CHECK(batch.num_prompts() == input.kept() && batch.num_responses() == batch.num_prompts() * n,
             "write_generate_output: ", batch.num_prompts(), " prompts and ", batch.num_responses(),
             " responses for ", input.kept(), " records of n = ", n);
  std::vector<int32_t> known;
  int64_t prompt = 0;
  for (const GenerateRecord& record : input.records) {
    if (record.skipped) continue;
    const Json doc = Json::parse(record.text);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t r = prompt * n + k;
      DAPO_CHECK(batch.response_prompt[size_t(r)] == prompt && batch.sample_index[size_t(r)] == k,
                 "write_generate_output: response ", r, " is not sample ", k, " of prompt ", prompt);
      Json line = doc;
      if (n > 1) line["sample_index"] = k;
      const std::span<const int32_t> ids = batch.response(r);
      line["response_ids"] = std::vector<int32_t>(ids.begin(), ids.end());
      if (tokenizer) {
        known.clear();
        for (const int32_t id : ids)
          if (tokenizer->has_id(id)) known.push_back(id);
        line["response"] = tokenizer->decode(known, true);
      }
      line["finish_reason"] = finish_reason_name(batch.finish_reason[size_t(r)]);
      out << line.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
    }
    ++prompt;
  }
}

}  // namespace dapo::rollout
