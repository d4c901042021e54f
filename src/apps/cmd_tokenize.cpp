// `dapo tokenize`: JSONL in on stdin, JSONL out on stdout. Each line's
// "text" gains "ids" (or, with --decode, each line's "ids" gains "text"); the
// other fields pass through in their order. A bad line stops the run with
// "stdin:LINE: ..." (exit code 2) after the lines before it were written.
#include <nlohmann/json.hpp>

#include <iostream>
#include <string>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/text_lines.h"
#include "dapo/core/json_text.h"
#include "dapo/data/tokenizer.h"

namespace dapo::apps {
namespace {

using Json = nlohmann::ordered_json;

std::vector<data::TokenId> read_ids(const Json& line, const std::string& where) {
  if (!line.contains("ids") || !line["ids"].is_array())
    throw UserError(cat(where, ": field \"ids\" must be an array of token ids"));
  std::vector<data::TokenId> ids;
  ids.reserve(line["ids"].size());
  for (const Json& v : line["ids"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      throw UserError(cat(where, ": field \"ids\" holds ", v.dump(), ", not a token id"));
    ids.push_back(data::TokenId(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace

int run_tokenize(const Invocation& inv) {
  if (!inv.options.count("tokenizer"))
    throw UserError("command line: dapo tokenize needs --tokenizer (the HF tokenizer.json)");
  const data::Tokenizer tok = data::Tokenizer::load(inv.options["tokenizer"].as<std::string>());
  const bool decode = inv.options["decode"].as<bool>();
  const bool skip_special = inv.options["skip-special-tokens"].as<bool>();

  std::ios::sync_with_stdio(false);
  std::string text;
  int64_t number = 0;
  while (read_bounded_line(std::cin, text, "stdin", number)) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines carry nothing
    const std::string where = cat("stdin:", number);
    refuse_nul_byte(text, where);
    Json line;
    try {
      line = Json::parse(text);
    } catch (const Json::parse_error& e) {
      throw UserError(cat(where, ": not valid JSON: ", e.what()));
    }
    if (!line.is_object()) throw UserError(cat(where, ": not a JSON object"));
    try {
      if (decode) {
        line["text"] = tok.decode(read_ids(line, where), skip_special);
      } else {
        if (!line.contains("text") || !line["text"].is_string())
          throw UserError(cat(where, ": field \"text\" must be a string"));
        line["ids"] = tok.encode(line["text"].get_ref<const std::string&>());
      }
    } catch (const UserError& e) {
      const std::string msg = e.what();
      if (msg.rfind(where + ":", 0) == 0) throw;
      throw UserError(cat(where, ": ", msg));  // e.g. an id outside the vocabulary
    }
    std::cout << line.dump() << '\n';
  }
  std::cout.flush();
  if (!std::cout) throw UserError("stdout: write failed");
  return kOk;
}

}  // namespace dapo::apps
