// The chat template: chat messages -> prompt text -> token ids, as the
// tokenizer's own Jinja template renders them (model.chat_template = hf),
// as Qwen's templates render plain conversations (chatml), or the raw text
// (none). auto is hf when the tokenizer has a chat template beside it
// (tokenizer_config.json or chat_template.jinja), else chatml.
//
// hf: the template of tokenizer_config.json, run by dapo's Jinja
// interpreter (dapo/data/jinja.h) exactly as transformers'
// apply_chat_template(messages, add_generation_prompt=..., tokenize=False)
// runs it (see dapo/data/hf_chat_template.h): Qwen2.5's default system
// message, Qwen3's <think> handling, tool turns, Llama-style bos_token, all
// come from the template itself.
//
// chatml, per message (Qwen2.5 and Qwen3 alike, for messages without tool
// calls or reasoning fields):
//   system/user/assistant:  <|im_start|>{role}\n{content}<|im_end|>\n
//   tool (a run of them):   <|im_start|>user\n<tool_response>\n{content}\n</tool_response>
//                           ... one block per message, then <|im_end|>\n
//   generation prompt:      <|im_start|>assistant\n
// Qwen2.5's template puts a default system message first when the first
// message is not a system message; Qwen3's does not. chatml's default is no
// default system message (Qwen3, and Qwen2.5-Math prompts that carry their
// own instruction); set ChatFormat::default_system to kQwen25DefaultSystem to
// reproduce Qwen2.5-Instruct's template exactly (or use hf). Assistant
// messages are rendered as given: Qwen3's template also strips <think>
// blocks from past assistant turns, which chatml does not do (RL prompts end
// with a user turn).
//
// none: the messages' contents concatenated, nothing added; the generation
// prompt adds nothing either.
//
// The text is encoded with the tokenizer, so the markers become their
// special-token ids (as HF apply_chat_template(tokenize=True) does): a
// "<|im_end|>" typed inside a message's content also becomes the special token.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/data/dataset.h"
#include "dapo/data/tokenizer.h"

namespace dapo::data {

class HfChatTemplate;  // dapo/data/hf_chat_template.h

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
  // hf: the tokenizer's chat template, parsed once (resolve_chat_format).
  // With kind hf or auto and no template here, encode_chat resolves it from
  // the tokenizer's own path (Tokenizer::source()).
  std::shared_ptr<const HfChatTemplate> hf;
};

// The format of model.chat_template = `kind` for the tokenizer at
// `tokenizer_json` (a tokenizer.json path; empty: no tokenizer):
//   hf:     the chat template beside it (HfChatTemplate::find_beside);
//           UserError naming tokenizer_config.json when there is none; with
//           no tokenizer, kind hf without a template (an error once used);
//   auto:   hf when there is one, else chatml;
//   chatml, none: as they are.
// Parsed templates are cached by path, so resolving again is cheap.
ChatFormat resolve_chat_format(ChatTemplate kind, const std::string& tokenizer_json);

// The prompt text of `messages`. With add_generation_prompt the text ends
// where the assistant's answer starts. UserError "WHERE: ..." for an empty
// message list, (chatml) a role other than system, user, assistant, tool, or
// (hf) the template failing (e.g. its raise_exception), or kind hf with no
// template; `where` names the record (e.g. "train.jsonl:12"). auto without a
// resolved template renders chatml.
std::string render_chat(std::span<const ChatMessage> messages, const ChatFormat& format,
                        bool add_generation_prompt, const std::string& where = "chat messages");

// encode(render_chat(...)), with kind hf or auto resolved first from the
// tokenizer's path when `format` carries no template.
std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 const ChatFormat& format, bool add_generation_prompt,
                                 const std::string& where = "chat messages");

// Ids that end a response: <|im_end|> (the chat turn's end) and
// <|endoftext|> (the document's end), those of them the tokenizer has, in
// that order; Qwen2.5/3's generation_config lists the same two.
std::vector<TokenId> eos_token_ids(const Tokenizer& tokenizer);

}  // namespace dapo::data
