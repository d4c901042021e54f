// An HF tokenizer's chat template: found beside tokenizer.json, parsed once,
// rendered with the variables transformers' apply_chat_template passes.
#include "dapo/data/hf_chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dapo/core/error.h"

namespace dapo::data {
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(cat(path.string(), ": cannot read the file"));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw UserError(cat(path.string(), ": cannot read the file"));
  return s.str();
}

// The special tokens transformers passes: those tokenizer_config.json sets,
// as strings (an AddedToken object gives its content).
nlohmann::ordered_json special_tokens_of(const nlohmann::ordered_json& config, const std::string& config_path) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_string()) {
      out[key] = *it;
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      out[key] = (*it)["content"];
    } else {
      throw UserError(cat(config_path, ": ", key, " must be a string or an object with a \"content\" string"));
    }
  }
  return out;
}

// chat_template: a string, or [{"name": ..., "template": ...}] (take "default").
std::optional<std::string> template_of(const nlohmann::ordered_json& config, const std::string& config_path) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string())
        throw UserError(cat(config_path, ": chat_template: a list entry is not {\"name\": ..., \"template\": ...}"));
      if (entry["name"] == "default") return entry["template"].get<std::string>();
    }
    throw UserError(cat(config_path, ": chat_template lists named templates but none named \"default\""));
  }
  throw UserError(cat(config_path, ": chat_template must be a string or a list of {name, template}"));
}

}  // namespace

std::shared_ptr<const HfChatTemplate> HfChatTemplate::from_text(const std::string& text,
                                                                nlohmann::ordered_json special_tokens,
                                                                const std::string& source) {
  jinja::Template t = jinja::Template::parse(text, source);
  return std::shared_ptr<const HfChatTemplate>(new HfChatTemplate(std::move(t), std::move(special_tokens), source));
}

std::shared_ptr<const HfChatTemplate> HfChatTemplate::from_config(const nlohmann::ordered_json& config,
                                                                  const std::string& config_path) {
  if (!config.is_object()) throw UserError(cat(config_path, ": not a JSON object"));
  const std::optional<std::string> text = template_of(config, config_path);
  if (!text)
    throw UserError(cat(config_path, ": no chat_template (model.chat_template = hf needs one; "
                                     "chatml or none do not)"));
  return from_text(*text, special_tokens_of(config, config_path), config_path + ": chat_template");
}

std::optional<std::shared_ptr<const HfChatTemplate>> HfChatTemplate::find_beside(const std::string& tokenizer_json) {
  const fs::path dir = fs::path(tokenizer_json).parent_path();
  const fs::path config_path = (dir.empty() ? fs::path(".") : dir) / "tokenizer_config.json";
  const fs::path jinja_path = (dir.empty() ? fs::path(".") : dir) / "chat_template.jinja";
  std::error_code ec;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const bool has_config = fs::exists(config_path, ec);
  if (has_config) {
    try {
      config = nlohmann::ordered_json::parse(read_file(config_path));
    } catch (const nlohmann::ordered_json::parse_error& e) {
      throw UserError(cat(config_path.string(), ": not valid JSON: ", e.what()));
    }
    if (!config.is_object()) throw UserError(cat(config_path.string(), ": not a JSON object"));
  }
  // transformers: a chat_template.jinja file clobbers the config's template.
  if (fs::exists(jinja_path, ec))
    return from_text(read_file(jinja_path), special_tokens_of(config, config_path.string()), jinja_path.string());
  if (!has_config || !template_of(config, config_path.string())) return std::nullopt;
  return from_config(config, config_path.string());
}

std::string HfChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                   const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json context = special_tokens_;
  context["messages"] = messages;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  return template_.render(context);
}

}  // namespace dapo::data
