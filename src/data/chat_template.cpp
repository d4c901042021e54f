// ChatML rendering with Qwen's rules (default system message, tool turns
// folded into one user turn), the raw `none` form, and the tokenizer's own
// template (hf), resolved once per tokenizer path.
#include "dapo/data/chat_template.h"

#include <filesystem>
#include <map>
#include <mutex>

#include "dapo/core/error.h"
#include "dapo/data/hf_chat_template.h"

namespace dapo::data {
namespace fs = std::filesystem;
namespace {

// The chat template beside each tokenizer.json seen (nullptr: none there),
// or the error finding it gave, so that a template is read and parsed once
// per process (a PromptSet resolves it from every thread).
std::shared_ptr<const HfChatTemplate> cached_template(const std::string& tokenizer_json) {
  struct Entry {
    std::shared_ptr<const HfChatTemplate> found;
    std::string error;
  };
  static std::mutex mutex;
  static std::map<std::string, Entry> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(tokenizer_json);
  if (it == cache.end()) {
    Entry e;
    try {
      if (auto t = HfChatTemplate::find_beside(tokenizer_json)) e.found = *t;
    } catch (const UserError& err) {
      e.error = err.what();
    }
    it = cache.emplace(tokenizer_json, std::move(e)).first;
  }
  if (!it->second.error.empty()) throw UserError(it->second.error);
  return it->second.found;
}

std::string render_hf(std::span<const ChatMessage> messages, const HfChatTemplate& hf, bool add_generation_prompt,
                      const std::string& where) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  try {
    return hf.render(list, add_generation_prompt);
  } catch (const UserError& e) {
    throw UserError(cat(where, ": ", e.what()));
  }
}

std::string render_chatml(std::span<const ChatMessage> messages, const ChatFormat& format,
                          bool add_generation_prompt, const std::string& where) {
  std::string out;
  if (messages.front().role != "system" && !format.default_system.empty())
    out += "<|im_start|>system\n" + format.default_system + "<|im_end|>\n";
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" || m.role == "user" || m.role == "assistant") {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    } else {
      throw UserError(cat(where, ": message ", i + 1, " has role '", m.role,
                          "'; chat_template = chatml takes system, user, assistant or tool"));
    }
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (format.empty_think) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace

ChatFormat resolve_chat_format(ChatTemplate kind, const std::string& tokenizer_json) {
  ChatFormat f;
  f.kind = kind;
  if (kind != ChatTemplate::hf && kind != ChatTemplate::auto_) return f;
  if (tokenizer_json.empty()) {
    if (kind == ChatTemplate::auto_) f.kind = ChatTemplate::chatml;
    return f;
  }
  f.hf = cached_template(tokenizer_json);
  if (f.hf) {
    f.kind = ChatTemplate::hf;
  } else if (kind == ChatTemplate::hf) {
    const fs::path dir = fs::path(tokenizer_json).parent_path();
    const std::string config = ((dir.empty() ? fs::path(".") : dir) / "tokenizer_config.json").string();
    std::error_code ec;
    throw UserError(cat(config, fs::exists(config, ec) ? ": has no chat_template" : ": no such file",
                        " (model.chat_template = hf takes the chat template from beside ", tokenizer_json,
                        "; use chatml or none, or give the model's tokenizer files)"));
  } else {
    f.kind = ChatTemplate::chatml;
  }
  return f;
}

std::string render_chat(std::span<const ChatMessage> messages, const ChatFormat& format,
                        bool add_generation_prompt, const std::string& where) {
  if (messages.empty()) throw UserError(cat(where, ": no chat messages"));
  if ((format.kind == ChatTemplate::hf || format.kind == ChatTemplate::auto_) && format.hf)
    return render_hf(messages, *format.hf, add_generation_prompt, where);
  // auto: resolved by the caller; until it is, the built-in ChatML.
  if (format.kind == ChatTemplate::chatml || format.kind == ChatTemplate::auto_)
    return render_chatml(messages, format, add_generation_prompt, where);
  if (format.kind == ChatTemplate::hf)
    throw UserError(cat(where, ": model.chat_template = hf needs the tokenizer's chat template (tokenizer_config.json "
                               "beside tokenizer.json)"));
  std::string out;
  for (const ChatMessage& m : messages) out += m.content;
  return out;
}

std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 const ChatFormat& format, bool add_generation_prompt, const std::string& where) {
  if ((format.kind == ChatTemplate::hf || format.kind == ChatTemplate::auto_) && !format.hf) {
    ChatFormat resolved = format;
    std::error_code ec;  // a tokenizer made from JSON text has a name, not a path
    const bool is_file = fs::is_regular_file(tokenizer.source(), ec);
    const ChatFormat r = resolve_chat_format(format.kind, is_file ? tokenizer.source() : std::string());
    resolved.kind = r.kind;
    resolved.hf = r.hf;
    return tokenizer.encode(render_chat(messages, resolved, add_generation_prompt, where));
  }
  return tokenizer.encode(render_chat(messages, format, add_generation_prompt, where));
}

std::vector<TokenId> eos_token_ids(const Tokenizer& tokenizer) {
  std::vector<TokenId> ids;
  for (const char* token : {"<|im_end|>", "<|endoftext|>"})
    if (const auto id = tokenizer.token_to_id(token)) ids.push_back(*id);
  return ids;
}

}  // namespace dapo::data
