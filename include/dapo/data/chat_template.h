// The chat template: chat messages -> prompt text -> token ids, as Qwen's
// Jinja templates render them (model.chat_template = chatml), or the raw
// text (none).
//
// chatml, per message (Qwen2.5 and Qwen3 alike, for messages without tool
// calls or reasoning fields):
//   system/user/assistant:  <|im_start|>{role}\n{content}<|im_end|>\n
//   tool (a run of them):   <|im_start|>user\n<tool_response>\n{content}\n</tool_response>
//                           ... one block per message, then <|im_end|>\n
//   generation prompt:      <|im_start|>assistant\n
// Qwen2.5's template puts a default system message first when the first
// message is not a system message; Qwen3's does not. dapo's default is no
// default system message (Qwen3, and Qwen2.5-Math prompts that carry their
// own instruction); set ChatFormat::default_system to kQwen25DefaultSystem to
// reproduce Qwen2.5-Instruct's template exactly. Assistant messages are
// rendered as given: Qwen3's template also strips <think> blocks from past
// assistant turns, which dapo does not do (RL prompts end with a user turn).
//
// none: the messages' contents concatenated, nothing added; the generation
// prompt adds nothing either.
//
// The text is encoded with the tokenizer, so the markers become their
// special-token ids (as HF apply_chat_template(tokenize=True) does): a
// "<|im_end|>" typed inside a message's content also becomes the special token.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/dataset.h"
#include "dapo/data/tokenizer.h"

namespace dapo::data {

// The system message of Qwen2.5(-Instruct, -Coder)'s template.
inline constexpr const char* kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

struct ChatFormat {
  ChatTemplate kind = ChatTemplate::chatml;
  // chatml: the system message put first when the first message is not one.
  // Empty (default): none.
  std::string default_system;
  // chatml: end the generation prompt with an empty think block
  // ("<think>\n\n</think>\n\n"), as Qwen3's enable_thinking=false does.
  bool empty_think = false;
};

// The prompt text of `messages`. With add_generation_prompt the text ends
// where the assistant's answer starts. UserError "WHERE: ..." for an empty
// message list, or (chatml) a role other than system, user, assistant, tool;
// `where` names the record (e.g. "train.jsonl:12").
std::string render_chat(std::span<const ChatMessage> messages, const ChatFormat& format,
                        bool add_generation_prompt, const std::string& where = "chat messages");

// encode(render_chat(...)).
std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 const ChatFormat& format, bool add_generation_prompt,
                                 const std::string& where = "chat messages");

// Ids that end a response: <|im_end|> (the chat turn's end) and
// <|endoftext|> (the document's end), those of them the tokenizer has, in
// that order; Qwen2.5/3's generation_config lists the same two.
std::vector<TokenId> eos_token_ids(const Tokenizer& tokenizer);

}  // namespace dapo::data
