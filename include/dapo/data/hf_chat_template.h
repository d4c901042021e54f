// The chat template of an HF tokenizer (model.chat_template = hf): the
// Jinja template of tokenizer_config.json (or of chat_template.jinja beside
// it, which transformers prefers when both exist), rendered as
// transformers' apply_chat_template renders it: with messages, tools=None,
// documents=None, add_generation_prompt, and the special tokens that
// tokenizer_config.json sets (bos_token, eos_token, unk_token, sep_token,
// pad_token, cls_token, mask_token; a null one is left undefined, as
// transformers 5 leaves it). See dapo/data/jinja.h for the interpreter.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "dapo/data/jinja.h"

namespace dapo::data {

class HfChatTemplate {
 public:
  // The template of a parsed tokenizer_config.json (`config`), read from
  // `config_path` (named in errors). `chat_template` is a string, or a list
  // of {"name", "template"} of which "default" is taken. UserError naming
  // the file when there is none, or when the template does not parse
  // (with its line and column).
  static std::shared_ptr<const HfChatTemplate> from_config(const nlohmann::ordered_json& config,
                                                           const std::string& config_path);
  // A template text with its special tokens ({"eos_token": "<|im_end|>", ...}).
  static std::shared_ptr<const HfChatTemplate> from_text(const std::string& text,
                                                         nlohmann::ordered_json special_tokens,
                                                         const std::string& source);

  // The template beside `tokenizer_json` (a path to tokenizer.json):
  // chat_template.jinja if it exists, else tokenizer_config.json's
  // chat_template; nullopt when neither file provides one. UserError when a
  // file that exists cannot be read or parsed.
  static std::optional<std::shared_ptr<const HfChatTemplate>> find_beside(const std::string& tokenizer_json);

  // The prompt text: `messages` is the JSON list of message objects (role,
  // content, and whatever else the template reads: tool_calls,
  // reasoning_content, ...); `extra` (a JSON object) adds or overrides
  // template variables (tools, enable_thinking, ...). UserError "SOURCE:LINE:COL: ..."
  // when the template fails (raise_exception, an undefined value used, a
  // type error).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  HfChatTemplate(jinja::Template t, nlohmann::ordered_json special, std::string source)
      : template_(std::move(t)), special_tokens_(std::move(special)), source_(std::move(source)) {}
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_;
  std::string source_;
};

}  // namespace dapo::data
