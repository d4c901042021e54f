// SFT lines: the chat, text and id forms tokenised as documented (chat
// template + generation prompt, response + EOS), truncation policies, and
// every error naming FILE:LINE.
#include <gtest/gtest.h>

#include "dapo/core/error.h"
#include "dapo/data/chat_template.h"
#include "dapo/trainer/sft_data.h"
#include "io/io_test_util.h"

namespace dapo::trainer {
namespace {

const data::Tokenizer& demo_tokenizer() {
  static const data::Tokenizer tok = data::Tokenizer::load(std::string(DAPO_SOURCE_DIR) + "/inputs/demo/tokenizer.json");
  return tok;
}

SftEncoding demo_encoding() {
  SftEncoding enc;
  enc.tokenizer = &demo_tokenizer();
  enc.eos_id = sft_eos_id(enc.tokenizer, {});
  enc.vocab_size = 392;
  enc.max_positions = 256;
  enc.max_prompt_length = 100;
  return enc;
}

std::string error_of(const std::string& line, const SftEncoding& enc) {
  SftExample ex;
  data::TruncationStats stats;
  try {
    parse_sft_line(line, "d.jsonl", 7, enc, ex, stats);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(SftData, ChatPromptGetsTemplateAndResponseGetsEos) {
  const SftEncoding enc = demo_encoding();
  const data::Tokenizer& tok = demo_tokenizer();
  const int32_t im_end = *tok.token_to_id("<|im_end|>");
  EXPECT_EQ(enc.eos_id, im_end);
  SftExample ex;
  data::TruncationStats stats;
  ASSERT_TRUE(parse_sft_line(R"({"prompt": [{"role": "user", "content": "Tom has 3 eggs."}], "response": "3 + 1 = 4", "x": 1})",
                             "d.jsonl", 3, enc, ex, stats));
  const std::vector<data::ChatMessage> msgs{{"user", "Tom has 3 eggs."}};
  EXPECT_EQ(ex.prompt_ids, data::encode_chat(tok, msgs, enc.chat, true));
  std::vector<int32_t> resp = tok.encode("3 + 1 = 4");
  resp.push_back(im_end);
  EXPECT_EQ(ex.response_ids, resp);
  EXPECT_EQ(ex.where, "d.jsonl:3");
  // The prompt ends with the generation prompt.
  EXPECT_TRUE(tok.decode(ex.prompt_ids).ends_with("<|im_start|>assistant\n")) << tok.decode(ex.prompt_ids);
}

TEST(SftData, TextAndIdForms) {
  const SftEncoding enc = demo_encoding();
  SftExample ex;
  data::TruncationStats stats;
  ASSERT_TRUE(parse_sft_line(R"({"prompt": "Q: 1+1", "response": "2"})", "d.jsonl", 1, enc, ex, stats));
  EXPECT_EQ(ex.prompt_ids, demo_tokenizer().encode("Q: 1+1"));
  EXPECT_EQ(ex.response_ids.back(), enc.eos_id);
  // Ids are used as they are, and win over text.
  ASSERT_TRUE(parse_sft_line(R"({"prompt_ids": [5, 6], "prompt": "x", "response_ids": [7, 391], "response": "y"})",
                             "d.jsonl", 2, enc, ex, stats));
  EXPECT_EQ(ex.prompt_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(ex.response_ids, (std::vector<int32_t>{7, 391}));
  // Without a tokenizer ids still work; the model's EOS is the fallback.
  SftEncoding bare = enc;
  bare.tokenizer = nullptr;
  EXPECT_EQ(sft_eos_id(nullptr, {387, 385}), 387);
  EXPECT_EQ(sft_eos_id(nullptr, {}), -1);
  ASSERT_TRUE(parse_sft_line(R"({"prompt_ids": [5], "response_ids": [7]})", "d.jsonl", 2, bare, ex, stats));
  EXPECT_NE(error_of(R"({"prompt": "x", "response_ids": [7]})", bare).find("there is no tokenizer"), std::string::npos);
}

TEST(SftData, TruncationPolicies) {
  SftEncoding enc = demo_encoding();
  enc.max_prompt_length = 3;
  SftExample ex;
  data::TruncationStats stats;
  ASSERT_TRUE(parse_sft_line(R"({"prompt_ids": [1, 2, 3, 4, 5], "response_ids": [7]})", "d.jsonl", 1, enc, ex, stats));
  EXPECT_EQ(ex.prompt_ids, (std::vector<int32_t>{3, 4, 5}));  // left: the end survives
  EXPECT_EQ(stats.truncated, 1);
  enc.truncation = Truncation::skip;
  EXPECT_FALSE(parse_sft_line(R"({"prompt_ids": [1, 2, 3, 4], "response_ids": [7]})", "d.jsonl", 1, enc, ex, stats));
  EXPECT_EQ(stats.skipped, 1);
  enc.truncation = Truncation::error;
  EXPECT_NE(error_of(R"({"prompt_ids": [1, 2, 3, 4], "response_ids": [7]})", enc).find("d.jsonl:7: prompt is 4 tokens"),
            std::string::npos);
}

TEST(SftData, ErrorsNameFileAndLine) {
  const SftEncoding enc = demo_encoding();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "d.jsonl:7: invalid JSON"},
      {"[1, 2]", "d.jsonl:7: expected a JSON object, got array"},
      {R"({"response": "x"})", "d.jsonl:7: no prompt"},
      {R"({"prompt": "x"})", "d.jsonl:7: no response"},
      {R"({"prompt": 5, "response": "x"})", "d.jsonl:7: field prompt: expected chat messages (a list) or text, got number"},
      {R"({"prompt": [], "response": "x"})", "d.jsonl:7: field prompt: empty list"},
      {R"({"prompt": [{"role": "user"}], "response": "x"})", "d.jsonl:7: field prompt[0]: expected"},
      {R"({"prompt": "x", "response": ["a"]})", "d.jsonl:7: field response: expected text, got array"},
      {R"({"prompt_ids": "1 2", "response_ids": [1]})", "d.jsonl:7: field prompt_ids: expected a list of token ids"},
      {R"({"prompt_ids": [1, 2.5], "response_ids": [1]})", "d.jsonl:7: field prompt_ids[1]: expected an integer"},
      {R"({"prompt_ids": [1], "response_ids": [392]})", "d.jsonl:7: field response_ids[0]: token id 392 is outside"},
      {R"({"prompt_ids": [], "response_ids": [1]})", "d.jsonl:7: empty prompt"},
      {R"({"prompt_ids": [1], "response_ids": []})", "d.jsonl:7: empty response"},
      {R"({"prompt": [{"role": "robot", "content": "x"}], "response": "x"})", "d.jsonl:7"},
  };
  for (const auto& [line, want] : cases) {
    const std::string got = error_of(line, enc);
    EXPECT_EQ(got.rfind(want, 0), 0u) << line << "\n  got: " << got;
  }
  SftEncoding small = enc;
  small.max_positions = 3;
  EXPECT_NE(error_of(R"({"prompt_ids": [1, 2], "response_ids": [3, 4]})", small)
                .find("d.jsonl:7: prompt + response is 4 tokens, more than the model's max_position_embeddings = 3"),
            std::string::npos);
  SftEncoding tiny_vocab = enc;
  tiny_vocab.vocab_size = 10;  // the tokenizer's ids do not fit this model
  EXPECT_NE(error_of(R"({"prompt": "hello there", "response": "x"})", tiny_vocab).find("outside the model's vocabulary"),
            std::string::npos);
}

TEST(SftData, FileLoadingCountsLinesAndReportsBadOnes) {
  const SftEncoding enc = demo_encoding();
  test::TempDir dir;
  const std::string path = dir.file("s.jsonl");
  test::write_text(path, "{\"prompt_ids\": [1], \"response_ids\": [2]}\n\n  \r\n{\"prompt_ids\": [3], \"response_ids\": [4]}\r\n");
  data::TruncationStats stats;
  const std::vector<SftExample> ex = load_sft_file(path, enc, stats);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[1].where, path + ":4");
  test::write_text(path, "{\"prompt_ids\": [1], \"response_ids\": [2]}\n{\"prompt_ids\": [1]}\n");
  try {
    load_sft_file(path, enc, stats);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ":2: no response", 0), 0u) << e.what();
  }
  test::write_text(path, "\n");
  EXPECT_THROW(load_sft_file(path, enc, stats), UserError);
  EXPECT_THROW(load_sft_file(dir.file("none.jsonl"), enc, stats), UserError);
}

}  // namespace
}  // namespace dapo::trainer
