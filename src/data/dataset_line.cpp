// One JSONL line -> one PromptRecord: the accepted forms (verl, raw prompt,
// simple problem/answer) and one precise error per way a line can be wrong.
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <optional>

#include "dapo/core/error.h"
#include "dapo/core/json_text.h"
#include "dapo/data/dataset.h"

namespace dapo::data {
namespace {

using nlohmann::json;

// Where the line is: every error starts with "FILE:LINE: ".
struct LineContext {
  const std::string& file;
  int64_t line;

  [[noreturn]] void fail(const std::string& message) const {
    throw UserError(cat(file, ":", line, ": ", message));
  }
  [[noreturn]] void fail_field(const std::string& field, const std::string& message) const {
    fail(cat("field ", field, ": ", message));
  }
  [[noreturn]] void wrong_type(const std::string& field, const char* expected, const json& got) const {
    fail_field(field, cat("expected ", expected, ", got ", got.type_name()));
  }
};

// The member `key` of `object`, or nullptr when absent or null (pandas writes
// missing values as null).
const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// An integer as text; an integral float as the integer it holds. Beyond 2^53
// a float no longer names one integer, so it keeps its shortest round-trip form.
std::optional<std::string> integer_text(const json& v) {
  if (v.is_number_integer()) return v.is_number_unsigned() ? std::to_string(v.get<uint64_t>())
                                                            : std::to_string(v.get<int64_t>());
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9007199254740992.0)
      return std::to_string(int64_t(d));
  }
  return std::nullopt;
}

std::string float_text(double d) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form
  return std::string(buf, res.ptr);
}

// A ground truth: a string as is, a number as its text.
std::string ground_truth_text(const LineContext& ctx, const std::string& field, const json& v) {
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (auto integer = integer_text(v)) {
    text = *integer;
  } else if (v.is_number_float()) {
    text = float_text(v.get<double>());
  } else {
    ctx.wrong_type(field, "a string or a number", v);
  }
  if (is_blank(text)) ctx.fail_field(field, "empty ground truth");
  return text;
}

std::vector<ChatMessage> parse_messages(const LineContext& ctx, const json& prompt) {
  if (prompt.empty()) ctx.fail_field("prompt", "empty list of messages");
  std::vector<ChatMessage> messages;
  messages.reserve(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) {
    const json& m = prompt[i];
    const std::string at = cat("prompt[", i, "]");
    if (!m.is_object()) ctx.wrong_type(at, "a message {\"role\", \"content\"}", m);
    const json* role = member(m, "role");
    const json* content = member(m, "content");
    if (!role) ctx.fail_field(at + ".role", "missing");
    if (!role->is_string()) ctx.wrong_type(at + ".role", "a string", *role);
    if (role->get_ref<const std::string&>().empty()) ctx.fail_field(at + ".role", "empty role");
    if (!content) ctx.fail_field(at + ".content", "missing");
    if (!content->is_string()) ctx.wrong_type(at + ".content", "a string", *content);
    messages.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return messages;
}

// nlohmann's message without its "[json.exception.parse_error.101] parse
// error at line 1, " preamble: the file's line is ours to name.
std::string json_error_detail(const json::parse_error& e) {
  const std::string what = e.what();
  const size_t at = what.find("column ");
  return at == std::string::npos ? what : what.substr(at);
}

}  // namespace

PromptRecord parse_prompt_line(std::string_view line, const std::string& file, int64_t line_number,
                               int64_t ordinal, std::string_view default_source) {
  const LineContext ctx{file, line_number};
  refuse_nul_byte(line, cat(file, ":", line_number));
  json doc;
  try {
    doc = json::parse(line.data(), line.data() + line.size());
  } catch (const json::parse_error& e) {
    ctx.fail(cat("invalid JSON: ", json_error_detail(e)));
  }
  if (!doc.is_object()) ctx.fail(cat("expected a JSON object, got ", doc.type_name()));

  PromptRecord r;
  r.file = file;
  r.line = line_number;

  if (const json* prompt = member(doc, "prompt")) {
    if (prompt->is_array()) {
      r.messages = parse_messages(ctx, *prompt);
    } else if (prompt->is_string()) {
      r.text = prompt->get<std::string>();
      if (r.text.empty()) ctx.fail_field("prompt", "empty prompt");
    } else {
      ctx.wrong_type("prompt", "a list of messages or a string", *prompt);
    }
  } else if (const json* problem = member(doc, "problem")) {
    if (!problem->is_string()) ctx.wrong_type("problem", "a string", *problem);
    if (problem->get_ref<const std::string&>().empty()) ctx.fail_field("problem", "empty problem");
    r.messages.push_back({"user", problem->get<std::string>()});
  } else {
    ctx.fail("missing prompt: expected field prompt (verl) or problem");
  }

  if (const json* reward_model = member(doc, "reward_model")) {
    if (!reward_model->is_object()) ctx.wrong_type("reward_model", "an object", *reward_model);
    const json* truth = member(*reward_model, "ground_truth");
    if (!truth) ctx.fail_field("reward_model.ground_truth", "missing");
    r.ground_truth = ground_truth_text(ctx, "reward_model.ground_truth", *truth);
  } else if (const json* answer = member(doc, "answer")) {
    r.ground_truth = ground_truth_text(ctx, "answer", *answer);
  } else {
    ctx.fail("missing ground truth: expected field reward_model.ground_truth (verl) or answer");
  }

  if (const json* source = member(doc, "data_source")) {
    if (!source->is_string()) ctx.wrong_type("data_source", "a string", *source);
    r.data_source = source->get<std::string>();
  }
  if (r.data_source.empty()) r.data_source = std::string(default_source);

  if (const json* extra = member(doc, "extra_info")) {
    if (!extra->is_object()) ctx.wrong_type("extra_info", "an object", *extra);
    if (const json* index = member(*extra, "index")) {
      if (index->is_string()) {
        r.index = index->get<std::string>();
      } else if (auto integer = integer_text(*index)) {
        r.index = *integer;
      } else {
        ctx.wrong_type("extra_info.index", "a string or an integer", *index);
      }
    }
  }
  if (r.index.empty()) r.index = std::to_string(ordinal);

  r.uid = prompt_uid(r.data_source, r.index);
  return r;
}

}  // namespace dapo::data
