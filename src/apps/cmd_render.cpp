// `dapo render`: the prompts of a JSONL file (the dataset loader's forms:
// verl chat or text prompts, or {"problem": ...}) as the trainer feeds them
// to the tokenizer - through model.chat_template, with the generation
// prompt - one JSON line per prompt: data_source, index, prompt_text (the
// exact string the tokenizer gets) and prompt_ids (before any truncation).
// Only the tokenizer files are needed: model.tokenizer (tokenizer.json with
// tokenizer_config.json beside it), or the tokenizer.json beside model.path.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/text_lines.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/dataset.h"
#include "dapo/data/hf_chat_template.h"
#include "dapo/data/tokenizer.h"
#include "dapo/io/output_clash.h"
#include "dapo/rollout/model_source.h"

namespace dapo::apps {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string tokenizer_path(const Config& config) {
  if (!config.model.tokenizer.empty()) {
    std::error_code ec;
    if (!fs::exists(config.model.tokenizer, ec))
      throw UserError(cat(config.model.tokenizer, ": no such file (model.tokenizer)"));
    return config.model.tokenizer;
  }
  if (config.model.path.empty())
    throw UserError("dapo render needs a tokenizer: --model.tokenizer=DIR/tokenizer.json (with tokenizer_config.json "
                    "beside it for model.chat_template = hf), or model.path with tokenizer.json beside the model");
  const std::string found = rollout::resolve_model_source("", config.model).tokenizer;
  if (found.empty())
    throw UserError(cat("dapo render needs a tokenizer: there is no tokenizer.json beside model.path = ",
                        config.model.path, "; set model.tokenizer"));
  return found;
}

std::vector<data::PromptRecord> read_prompts(const std::string& input) {
  if (input != "-") return data::load_prompt_file(input);
  std::vector<data::PromptRecord> records;
  std::string line;
  int64_t number = 0;
  while (read_bounded_line(std::cin, line, "<stdin>", number)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    records.push_back(data::parse_prompt_line(line, "<stdin>", number, int64_t(records.size()), "stdin"));
  }
  if (records.empty()) throw UserError("<stdin>: no prompt records");
  return records;
}

const char* kind_name(ChatTemplate kind) {
  switch (kind) {
    case ChatTemplate::hf: return "hf";
    case ChatTemplate::chatml: return "chatml";
    case ChatTemplate::none: return "none";
    case ChatTemplate::auto_: return "auto";
  }
  return "?";
}

}  // namespace

int run_render(const Invocation& inv) {
  if (!inv.options.count("input")) throw UserError("command line: dapo render needs --input PROMPTS.jsonl ('-': stdin)");
  const Config& config = *inv.config;
  const std::string input = inv.options["input"].as<std::string>();
  const std::string tok_path = tokenizer_path(config);
  const data::Tokenizer tok = data::Tokenizer::load(tok_path);
  const data::ChatFormat format = data::resolve_chat_format(config.model.chat_template, tok_path);
  const std::string output = inv.options.count("output") ? inv.options["output"].as<std::string>() : "-";
  std::vector<io::InputFile> inputs{{input, "--input"}};
  io::add_tokenizer_inputs(inputs, tok_path, config.model.tokenizer.empty() ? "the tokenizer" : "model.tokenizer");
  io::refuse_output_clash(output, "--output", inputs);
  const std::vector<data::PromptRecord> records = read_prompts(input);

  std::ofstream out_file;
  if (output != "-") {
    out_file.open(output);
    if (!out_file) throw UserError(cat(output, ": cannot open the output file"));
  }
  std::ostream& out = output == "-" ? std::cout : out_file;
  int64_t chat = 0;
  for (const data::PromptRecord& rec : records) {
    std::string text;
    if (rec.is_chat()) {
      text = data::render_chat(rec.messages, format, true, rec.where());
      ++chat;
    } else {
      text = rec.text;
    }
    Json line;
    line["data_source"] = rec.data_source;
    line["index"] = rec.index;
    line["prompt_text"] = text;
    line["prompt_ids"] = tok.encode(text);
    out << line.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
  }
  out.flush();
  if (!out) throw UserError(cat(output == "-" ? "<stdout>" : output, ": write failed"));
  std::string how = kind_name(format.kind);
  if (format.hf) how += " (" + format.hf->source() + ")";
  std::fprintf(stderr, "render: %lld prompts (%lld chat, chat template %s), tokenizer %s\n",
               static_cast<long long>(records.size()), static_cast<long long>(chat), how.c_str(), tok_path.c_str());
  return kOk;
}

}  // namespace dapo::apps
