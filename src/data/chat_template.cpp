// ChatML rendering with Qwen's rules (default system message, tool turns
// folded into one user turn) and the raw `none` form.
#include "dapo/data/chat_template.h"

#include "dapo/core/error.h"

namespace dapo::data {
namespace {

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

std::string render_chat(std::span<const ChatMessage> messages, const ChatFormat& format,
                        bool add_generation_prompt, const std::string& where) {
  if (messages.empty()) throw UserError(cat(where, ": no chat messages"));
  // auto: resolved by the caller; until it is, the built-in ChatML.
  if (format.kind == ChatTemplate::chatml || format.kind == ChatTemplate::auto_)
    return render_chatml(messages, format, add_generation_prompt, where);
  if (format.kind == ChatTemplate::hf)
    throw UserError(cat(where, ": model.chat_template = hf needs the tokenizer's chat template"));
  std::string out;
  for (const ChatMessage& m : messages) out += m.content;
  return out;
}

std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 const ChatFormat& format, bool add_generation_prompt, const std::string& where) {
  return tokenizer.encode(render_chat(messages, format, add_generation_prompt, where));
}

std::vector<TokenId> eos_token_ids(const Tokenizer& tokenizer) {
  std::vector<TokenId> ids;
  for (const char* token : {"<|im_end|>", "<|endoftext|>"})
    if (const auto id = tokenizer.token_to_id(token)) ids.push_back(*id);
  return ids;
}

}  // namespace dapo::data
