// The chat template: Qwen's ChatML text for every role and option, the raw
// `none` form, ids through the tiny tokenizer, EOS ids, and the errors.
#include "dapo/data/chat_template.h"

#include <gtest/gtest.h>

#include "dapo/core/error.h"
#include "test_tokenizer_util.h"

namespace dapo::data {
namespace {

using Messages = std::vector<ChatMessage>;

TEST(ChatTemplate, ChatMlAsQwen3RendersIt) {
  const Messages m = {{"user", "What is 1+1?"}};
  EXPECT_EQ(render_chat(m, {}, true), "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(m, {}, false), "<|im_start|>user\nWhat is 1+1?<|im_end|>\n");
  const Messages conv = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  EXPECT_EQ(render_chat(conv, {}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  // A system message later in the conversation is rendered in place.
  const Messages late = {{"user", "a"}, {"system", "b"}};
  EXPECT_EQ(render_chat(late, {}, false), "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n");
  // Content is copied verbatim: empty, multi-line, with markers.
  const Messages odd = {{"user", ""}, {"assistant", "x\n\n<|im_end|>"}};
  EXPECT_EQ(render_chat(odd, {}, false),
            "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\nx\n\n<|im_end|><|im_end|>\n");
}

TEST(ChatTemplate, Qwen25DefaultSystemMessageOnlyWhenTheFirstIsNotSystem) {
  ChatFormat qwen25;
  qwen25.default_system = kQwen25DefaultSystem;
  EXPECT_EQ(render_chat(Messages{{"user", "Hi"}}, qwen25, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(Messages{{"system", "S"}, {"user", "Hi"}}, qwen25, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  // Only the first message decides: a later system message does not stop it.
  EXPECT_EQ(render_chat(Messages{{"user", "Hi"}, {"system", "S"}}, qwen25, false),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nS<|im_end|>\n");
}

TEST(ChatTemplate, ToolResultsShareOneUserTurn) {
  const Messages m = {{"user", "q"}, {"assistant", "calling"}, {"tool", "r1"}, {"tool", "r2"}, {"user", "ok"},
                      {"tool", "r3"}};
  EXPECT_EQ(render_chat(m, {}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n"
            "<|im_start|>user\nok<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr3\n</tool_response><|im_end|>\n");
}

TEST(ChatTemplate, EmptyThinkBlockForQwen3WithoutThinking) {
  ChatFormat f;
  f.empty_think = true;
  EXPECT_EQ(render_chat(Messages{{"user", "Hi"}}, f, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(render_chat(Messages{{"user", "Hi"}}, f, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, NoneIsTheRawText) {
  ChatFormat none;
  none.kind = ChatTemplate::none;
  none.default_system = kQwen25DefaultSystem;  // ignored without chatml
  EXPECT_EQ(render_chat(Messages{{"user", "Compute 2+2."}}, none, true), "Compute 2+2.");
  EXPECT_EQ(render_chat(Messages{{"system", "A"}, {"user", "B"}, {"whatever", "C"}}, none, false), "ABC");
}

TEST(ChatTemplate, Errors) {
  try {
    render_chat(Messages{}, {}, true, "train.jsonl:3");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "train.jsonl:3: no chat messages");
  }
  try {
    render_chat(Messages{{"user", "a"}, {"bot", "b"}}, {}, true, "train.jsonl:4");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "train.jsonl:4: message 2 has role 'bot'; chat_template = chatml takes system, user, assistant or tool");
  }
}

TEST(ChatTemplate, IdsUseTheSpecialTokensAndEosComesFromTheTokenizer) {
  const Tokenizer tok = Tokenizer::load(testing::tiny_path());
  // Tiny ids (make_tiny.py): <|im_start|> 277, <|im_end|> 278, <|endoftext|> 276, "hello" 260.
  const std::vector<TokenId> ids = encode_chat(tok, Messages{{"user", "hello"}}, {}, true);
  EXPECT_EQ(ids, (std::vector<TokenId>{277, 'u', 's', 'e', 'r', '\n', 260, 278, '\n', 277, 'a', 's', 's', 'i',
                                       's', 't', 'a', 'n', 't', '\n'}));
  EXPECT_EQ(tok.decode(ids), render_chat(Messages{{"user", "hello"}}, {}, true));
  EXPECT_EQ(eos_token_ids(tok), (std::vector<TokenId>{278, 276}));
  nlohmann::json gpt2 = testing::tiny_json();
  gpt2["added_tokens"] = nlohmann::json::array({gpt2["added_tokens"][0]});
  EXPECT_EQ(eos_token_ids(testing::load_json(gpt2)), (std::vector<TokenId>{276}));
}

}  // namespace
}  // namespace dapo::data
