// The JSONL side of `dapo generate`, in process: every accepted prompt form
// (ids, text, chat messages), uids as the dataset computes them, the
// truncation policies, every error message naming FILE:LINE, and the
// output lines (fields kept in order, n = 1 and n > 1, response text).
#include "dapo/rollout/generate_jsonl.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "dapo/core/error.h"
#include "dapo/data/dataset.h"
#include "io/io_test_util.h"

namespace dapo::rollout {
namespace {

using test::TempDir;

const data::Tokenizer& tiny_tokenizer() {
  static const data::Tokenizer t =
      data::Tokenizer::load(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json");
  return t;
}

PromptEncoding encoding(bool with_tokenizer, int64_t max_len = 100, Truncation policy = Truncation::left) {
  PromptEncoding e;
  e.tokenizer = with_tokenizer ? &tiny_tokenizer() : nullptr;
  e.vocab_size = 300;
  e.max_prompt_length = max_len;
  e.truncation = policy;
  return e;
}

struct InputFile {
  TempDir dir;
  std::string path;
  explicit InputFile(const std::string& text, const std::string& name = "prompts.jsonl") : path(dir.file(name)) {
    test::write_text(path, text);
  }
};

TEST(GenerateJsonl, ReadsIdsTextAndChatPrompts) {
  const InputFile f(
      "{\"prompt_ids\": [3, 4, 5], \"prompt\": \"ignored\"}\n"
      "\n"
      "{\"prompt\": \"Hello world\", \"data_source\": \"src\", \"extra_info\": {\"index\": \"a-1\"}}\n"
      "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}], \"extra_info\": {\"index\": 12.0}}\n");
  const GenerateInput in = read_generate_input(f.path, encoding(true));
  ASSERT_EQ(in.records.size(), 3u);
  EXPECT_EQ(in.records[0].line, 1);
  EXPECT_EQ(in.records[1].line, 3);
  EXPECT_EQ(in.records[2].line, 4);
  EXPECT_EQ(in.records[0].prompt_ids, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(in.records[1].prompt_ids, tiny_tokenizer().encode("Hello world"));
  data::ChatFormat chat;
  EXPECT_EQ(in.records[2].prompt_ids,
            data::encode_chat(tiny_tokenizer(), std::vector<data::ChatMessage>{{"user", "hi"}}, chat, true));
  // uids as for training data: (data_source or the file's stem, index or ordinal).
  EXPECT_EQ(in.records[0].uid, data::prompt_uid("prompts", "0"));
  EXPECT_EQ(in.records[1].uid, data::prompt_uid("src", "a-1"));
  EXPECT_EQ(in.records[2].uid, data::prompt_uid("prompts", "12"));
  EXPECT_EQ(in.kept(), 3);
  EXPECT_EQ(in.duplicate_uids, 0);
  EXPECT_EQ(in.records[1].text,
            "{\"prompt\": \"Hello world\", \"data_source\": \"src\", \"extra_info\": {\"index\": \"a-1\"}}");
  // Without a chat template the messages' text is used as is.
  PromptEncoding none = encoding(true);
  none.chat.kind = ChatTemplate::none;
  EXPECT_EQ(read_generate_input(f.path, none).records[2].prompt_ids, tiny_tokenizer().encode("hi"));
}

TEST(GenerateJsonl, TruncationPolicies) {
  const InputFile f("{\"prompt_ids\": [1, 2, 3, 4, 5, 6]}\n{\"prompt_ids\": [7, 8]}\n{\"prompt_ids\": [9, 9, 9, 9, 9]}\n");
  const GenerateInput left = read_generate_input(f.path, encoding(false, 4, Truncation::left));
  EXPECT_EQ(left.records[0].prompt_ids, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(left.records[1].prompt_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(left.truncation.truncated, 2);
  EXPECT_EQ(left.truncation.longest, 6);
  EXPECT_EQ(left.kept(), 3);
  const GenerateInput skip = read_generate_input(f.path, encoding(false, 4, Truncation::skip));
  EXPECT_TRUE(skip.records[0].skipped);
  EXPECT_FALSE(skip.records[1].skipped);
  EXPECT_TRUE(skip.records[2].skipped);
  EXPECT_EQ(skip.kept(), 1);
  EXPECT_EQ(skip.truncation.skipped, 2);
  EXPECT_EQ(test::error_of([&] { read_generate_input(f.path, encoding(false, 4, Truncation::error)); })
                .rfind(f.path + ":1: prompt is 6 tokens, longer than data.max_prompt_length = 4", 0),
            0u);
}

TEST(GenerateJsonl, CountsRepeatedUids) {
  const InputFile f(
      "{\"prompt_ids\": [1], \"extra_info\": {\"index\": 5}}\n{\"prompt_ids\": [2], \"extra_info\": {\"index\": \"5\"}}\n"
      "{\"prompt_ids\": [3]}\n{\"prompt_ids\": [4]}\n");
  const GenerateInput in = read_generate_input(f.path, encoding(false));
  EXPECT_EQ(in.duplicate_uids, 1);  // index 5 twice; the others are ordinals 2 and 3
  EXPECT_EQ(in.records[0].uid, in.records[1].uid);
}

TEST(GenerateJsonl, EveryBadLineNamesFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt_ids\": [1, 2]\n", ":1: invalid JSON: column"},
      {"{\"prompt_ids\": [1]}\n[1, 2]\n", ":2: expected a JSON object, got array"},
      {"{\"text\": \"hi\"}\n", ":1: missing prompt: expected field prompt_ids (token ids) or prompt (text or chat messages)"},
      {"{\"prompt_ids\": null, \"prompt\": null}\n", ":1: missing prompt"},
      {"\n\n{\"prompt_ids\": [1, 300]}\n", ":3: field prompt_ids[1]: 300 is not a token id of the model (0..299)"},
      {"{\"prompt_ids\": [-1]}\n", ":1: field prompt_ids[0]: -1 is not a token id of the model (0..299)"},
      {"{\"prompt_ids\": [18446744073709551615]}\n", ":1: field prompt_ids[0]: 18446744073709551615 is not a token id"},
      {"{\"prompt_ids\": [1.5]}\n", ":1: field prompt_ids[0]: expected an integer token id, got number"},
      {"{\"prompt_ids\": \"1 2\"}\n", ":1: field prompt_ids: expected a list of token ids, got string"},
      {"{\"prompt_ids\": []}\n", ":1: field prompt_ids: empty prompt"},
      {"{\"prompt\": 5}\n", ":1: field prompt: expected a string or a list of chat messages, got number"},
      {"{\"prompt\": \"\"}\n", ":1: field prompt: empty prompt"},
      {"{\"prompt\": []}\n", ":1: field prompt: empty list of messages"},
      {"{\"prompt\": [\"hi\"]}\n", ":1: field prompt[0]: expected a message {\"role\", \"content\"}, got string"},
      {"{\"prompt\": [{\"content\": \"x\"}]}\n", ":1: field prompt[0].role: missing"},
      {"{\"prompt\": [{\"role\": 1, \"content\": \"x\"}]}\n", ":1: field prompt[0].role: expected a string, got number"},
      {"{\"prompt\": [{\"role\": \"user\"}]}\n", ":1: field prompt[0].content: missing"},
      {"{\"prompt\": [{\"role\": \"user\", \"content\": [1]}]}\n",
       ":1: field prompt[0].content: expected a string, got array"},
      {"{\"prompt\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n", ":1: message 1 has role 'robot'"},
      {"{\"prompt_ids\": [1], \"data_source\": 3}\n", ":1: field data_source: expected a string, got number"},
      {"{\"prompt_ids\": [1], \"extra_info\": 3}\n", ":1: field extra_info: expected an object, got number"},
      {"{\"prompt_ids\": [1], \"extra_info\": {\"index\": 1.5}}\n",
       ":1: field extra_info.index: expected a string or an integer, got number"},
  };
  for (const auto& [text, message] : cases) {
    const InputFile f(text);
    const std::string err = test::error_of([&] { read_generate_input(f.path, encoding(true)); });
    EXPECT_EQ(err.rfind(f.path + message, 0), 0u) << text << "\n" << err;
  }
  const InputFile text("{\"prompt\": \"hello\"}\n");
  EXPECT_EQ(test::error_of([&] { read_generate_input(text.path, encoding(false)); }),
            text.path + ":1: field prompt: a text prompt needs a tokenizer (model.tokenizer, or tokenizer.json beside "
                        "the model); without one give prompt_ids");
  // A tokenizer whose ids do not fit the model.
  PromptEncoding small = encoding(true);
  small.vocab_size = 100;
  const InputFile special("{\"prompt\": \"<|im_end|>\"}\n");
  EXPECT_NE(test::error_of([&] { read_generate_input(special.path, small); })
                .find(special.path + ":1: field prompt: the tokenizer gives id 278, outside the model's vocabulary "
                                     "(0..99): does "),
            std::string::npos);
  const InputFile empty("\n \n");
  EXPECT_EQ(test::error_of([&] { read_generate_input(empty.path, encoding(false)); }),
            empty.path + ": no prompt in the file");
  TempDir dir;
  EXPECT_EQ(test::error_of([&] { read_generate_input(dir.file("none.jsonl"), encoding(false)); }),
            dir.file("none.jsonl") + ": cannot open the input file");
  EXPECT_EQ(test::error_of([&] { read_generate_input(dir.path().string(), encoding(false)); }),
            dir.path().string() + ": is a directory, not a JSONL file");
}

TEST(GenerateJsonl, WritesLinesBackWithResponses) {
  const InputFile f(
      "{\"z\": 1, \"prompt_ids\": [3, 4], \"a\": {\"b\": [1, 2]}, \"response_ids\": \"old\"}\n"
      "{\"prompt_ids\": [1, 2, 3, 4, 5, 6]}\n"
      "{\"prompt_ids\": [5], \"k\": \"é\"}\n");
  const GenerateInput in = read_generate_input(f.path, encoding(false, 4, Truncation::skip));
  ASSERT_EQ(in.kept(), 2);
  const data::Tokenizer& tok = tiny_tokenizer();
  const std::vector<int32_t> hello = tok.encode("Hello");
  std::vector<int32_t> with_eos = hello;
  with_eos.push_back(278);  // <|im_end|>: in the ids, not in the text
  with_eos.insert(with_eos.begin(), 290);  // beyond the tokenizer's vocabulary: left out of the text
  RolloutBatch b;
  b.add_prompt(1, in.records[0].prompt_ids);
  b.add_prompt(2, in.records[2].prompt_ids);
  b.add_response(0, 0, with_eos, std::vector<float>(with_eos.size(), -1.0f), FinishReason::eos);
  b.add_response(0, 1, hello, std::vector<float>(hello.size(), -1.0f), FinishReason::length);
  b.add_response(1, 0, std::vector<int32_t>{7}, std::vector<float>{-1.0f}, FinishReason::length);
  b.add_response(1, 1, std::vector<int32_t>{}, std::vector<float>{}, FinishReason::length);
  std::ostringstream out;
  write_generate_output(out, in, b, 2, &tok);
  std::vector<std::string> lines;
  std::istringstream lines_in(out.str());
  for (std::string l; std::getline(lines_in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u);
  const std::string hello_ids = nlohmann::json(hello).dump();
  EXPECT_EQ(lines[0], "{\"z\":1,\"prompt_ids\":[3,4],\"a\":{\"b\":[1,2]},\"response_ids\":" +
                          nlohmann::json(with_eos).dump() + ",\"sample_index\":0,\"response\":\"Hello\","
                          "\"finish_reason\":\"eos\"}");
  EXPECT_EQ(lines[1], "{\"z\":1,\"prompt_ids\":[3,4],\"a\":{\"b\":[1,2]},\"response_ids\":" + hello_ids +
                          ",\"sample_index\":1,\"response\":\"Hello\",\"finish_reason\":\"length\"}");
  EXPECT_EQ(lines[2].rfind("{\"prompt_ids\":[5],\"k\":\"é\",\"sample_index\":0,\"response_ids\":[7],", 0), 0u)
      << lines[2];
  EXPECT_EQ(lines[3].rfind("{\"prompt_ids\":[5],\"k\":\"é\",\"sample_index\":1,\"response_ids\":[],\"response\":\"\","
                           "\"finish_reason\":\"length\"}",
                           0),
            0u)
      << lines[3];
  // n = 1 and no tokenizer: no sample_index, no response text.
  RolloutBatch one;
  one.add_prompt(1, in.records[0].prompt_ids);
  one.add_prompt(2, in.records[2].prompt_ids);
  one.add_response(0, 0, std::vector<int32_t>{9}, std::vector<float>{-1.0f}, FinishReason::length);
  one.add_response(1, 0, std::vector<int32_t>{8}, std::vector<float>{-1.0f}, FinishReason::eos);
  std::ostringstream out1;
  write_generate_output(out1, in, one, 1, nullptr);
  EXPECT_EQ(out1.str(),
            "{\"z\":1,\"prompt_ids\":[3,4],\"a\":{\"b\":[1,2]},\"response_ids\":[9],\"finish_reason\":\"length\"}\n"
            "{\"prompt_ids\":[5],\"k\":\"é\",\"response_ids\":[8],\"finish_reason\":\"eos\"}\n");
}

}  // namespace
}  // namespace dapo::rollout
