// The demo files shipped in inputs/demo/: they load with dapo's dataset
// loader, tokenizer and config parser (and the tokenizer encodes as HF
// tokenizers does), their ground truths are right (read
// back from the problem text independently), and every prompt and worked
// solution fits the demo's token budgets under the ChatML template.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "arithmetic_parse.h"
#include "dapo/core/config.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/dataset.h"
#include "dapo/data/tokenizer.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::data {
namespace {

std::string demo(const std::string& name) { return std::string(DAPO_SOURCE_DIR) + "/inputs/demo/" + name; }

// Prompt plus worked solution plus <|im_end|>: what one SFT sequence or one
// correct rollout holds.
constexpr int64_t kMaxSequenceTokens = 96;

TEST(DemoInputs, TokenizerIsTinyByteLevelBpeWithChatMlSpecials) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  EXPECT_LE(tok.vocab_size(), 512);
  const int64_t v = tok.vocab_size();
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), TokenId(v - 3));
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), TokenId(v - 2));
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), TokenId(v - 1));
  for (const TokenId id : {TokenId(v - 3), TokenId(v - 2), TokenId(v - 1)}) EXPECT_TRUE(tok.is_special(id));
  EXPECT_EQ(eos_token_ids(tok), (std::vector<TokenId>{TokenId(v - 1), TokenId(v - 3)}));
  // Byte tokens first (id = byte value), so any text encodes; digits stay single tokens.
  EXPECT_EQ(tok.encode("A"), std::vector<TokenId>{'A'});
  EXPECT_EQ(tok.encode("2025"), (std::vector<TokenId>{'2', '0', '2', '5'}));
  // The template words are whole tokens.
  for (const char* word : {"Answer", " apples", " How", " many", " does", " have", " now", " times"})
    EXPECT_EQ(tok.encode(word).size(), 1u) << word;
  const std::string other = "Ünïcode text, not from the demo: 3.14 \xF0\x9F\x98\x80";
  EXPECT_EQ(tok.decode(tok.encode(other)), other);
}

// HF tokenizers reads the demo tokenizer as dapo does: ids and decoded text
// of tests/fixtures/demo/hf_reference.jsonl (made by the script beside it).
TEST(DemoInputs, TokenizerMatchesHfTokenizers) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  std::ifstream in(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/demo/hf_reference.jsonl");
  ASSERT_TRUE(in.good());
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json d = nlohmann::json::parse(line);
    if (d.contains("meta")) {
      EXPECT_EQ(d["meta"]["vocab"].get<int64_t>(), tok.vocab_size());
      continue;
    }
    const std::string text = d["text"].get<std::string>();
    const std::vector<TokenId> ids = d["ids"].get<std::vector<TokenId>>();
    EXPECT_EQ(tok.encode(text), ids) << text << "\n(tokenizer.json changed? rerun "
                                        "tests/fixtures/demo/make_hf_reference.py where HF tokenizers is installed)";
    EXPECT_EQ(tok.decode(ids), d["decoded"].get<std::string>()) << text;
    EXPECT_EQ(tok.decode(ids, true), d["decoded_skip"].get<std::string>()) << text;
    ++cases;
  }
  EXPECT_EQ(cases, 28);
}

TEST(DemoInputs, ModelConfigMatchesTheTokenizer) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  const model::Qwen2Config c = model::load_qwen2_config(demo("model/config.json"));
  EXPECT_EQ(c.vocab_size, (tok.vocab_size() + 7) / 8 * 8);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{*tok.token_to_id("<|im_end|>")});
  EXPECT_EQ(c.bos_token_id, *tok.token_to_id("<|endoftext|>"));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.intermediate_size, 256);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_GE(c.max_position_embeddings, kMaxSequenceTokens);
  EXPECT_NO_THROW(model::check_tp_compatible(c, 2));  // the demo runs on 2 ranks, at any tp
}

TEST(DemoInputs, EveryProblemIsRightAndFitsTheTokenBudgets) {
  const Tokenizer tok = Tokenizer::load(demo("tokenizer.json"));
  const TokenId im_end = *tok.token_to_id("<|im_end|>");
  // The budgets of the demo's configuration.
  const Config config = load_config(std::string(DAPO_SOURCE_DIR) + "/inputs/demo.ini", {});
  const int64_t max_prompt = config.data.max_prompt_length;
  const int64_t max_response = config.rollout.max_response_length;

  std::vector<PromptRecord> all;
  for (const auto& [name, count] : {std::pair{"train.jsonl", 2000}, {"val.jsonl", 200}, {"sft.jsonl", 2000}}) {
    const std::vector<PromptRecord> records = load_prompt_file(demo(name));
    ASSERT_EQ(int64_t(records.size()), count) << name;
    const bool sft = std::string(name) == "sft.jsonl";
    std::vector<std::string> responses;
    if (sft) {  // the loader does not keep "response": read it here
      std::ifstream in(demo(name));
      for (std::string line; std::getline(in, line);)
        responses.push_back(nlohmann::json::parse(line).at("response").get<std::string>());
      ASSERT_EQ(responses.size(), records.size());
    }
    int64_t longest = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      const PromptRecord& r = records[i];
      ASSERT_EQ(r.messages.size(), 1u) << r.where();
      const testing::ParsedArithmetic parsed = testing::parse_arithmetic_text(r.messages[0].content);
      ASSERT_EQ(parsed.error, "") << r.where();
      EXPECT_EQ(r.ground_truth, std::to_string(parsed.answer)) << r.where();
      if (sft) EXPECT_EQ(responses[i], parsed.solution) << r.where();

      const std::vector<TokenId> prompt = encode_chat(tok, r.messages, ChatFormat{}, true, r.where());
      std::vector<TokenId> response = tok.encode(parsed.solution);
      response.push_back(im_end);
      EXPECT_LE(int64_t(prompt.size()), max_prompt) << r.where() << ": data.max_prompt_length of inputs/demo.ini";
      EXPECT_LE(int64_t(response.size()), max_response)
          << r.where() << ": rollout.max_response_length of inputs/demo.ini";
      EXPECT_LE(int64_t(prompt.size() + response.size()), kMaxSequenceTokens) << r.where();
      longest = std::max(longest, int64_t(prompt.size() + response.size()));
      EXPECT_EQ(tok.decode(prompt), render_chat(r.messages, ChatFormat{}, true));
    }
    EXPECT_GT(longest, 20) << name;  // the tokenizer is not cheating by dropping text
    all.insert(all.end(), records.begin(), records.end());
  }
  EXPECT_NO_THROW(PromptDataset{all});  // one set of uids for the three files
}

}  // namespace
}  // namespace dapo::data
