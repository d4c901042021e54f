// parse_prompt_line: every accepted form of a prompt line, the conversions
// (numbers to text, defaults), and every error message with its file:line.
#include <gtest/gtest.h>

#include <string>

#include "dapo/core/error.h"
#include "dapo/data/dataset.h"

namespace dapo::data {
namespace {

PromptRecord parse(const std::string& line, int64_t ordinal = 0) {
  return parse_prompt_line(line, "dir/f.jsonl", 7, ordinal, "f");
}

// The UserError message for `line`, or "" when it parsed.
std::string error_of(const std::string& line) {
  try {
    parse(line);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(DatasetLine, VerlDapoMathLine) {
  const PromptRecord r = parse(
      R"({"data_source": "math_dapo", "prompt": [{"content": "What is 3+4?", "role": "user"}],)"
      R"( "ability": "MATH", "reward_model": {"ground_truth": "7", "style": "rule-lighteval/MATH_v2"},)"
      R"( "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}})");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "What is 3+4?");
  EXPECT_TRUE(r.is_chat());
  EXPECT_TRUE(r.text.empty());
  EXPECT_EQ(r.ground_truth, "7");
  EXPECT_EQ(r.data_source, "math_dapo");
  EXPECT_EQ(r.index, "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079");
  EXPECT_EQ(r.uid, prompt_uid("math_dapo", "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"));
  EXPECT_EQ(r.file, "dir/f.jsonl");
  EXPECT_EQ(r.line, 7);
  EXPECT_EQ(r.where(), "dir/f.jsonl:7");
}

TEST(DatasetLine, ConversationKeepsEveryMessageInOrder) {
  const PromptRecord r = parse(
      R"({"prompt":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},)"
      R"({"role":"assistant","content":""},{"role":"user","content":"2+2?"}],"reward_model":{"ground_truth":"4"}})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");  // an empty turn is legal
  EXPECT_EQ(r.messages[3].content, "2+2?");
}

TEST(DatasetLine, RawTextPromptIsKeptAsIs) {
  const PromptRecord r = parse(R"({"prompt":"<|im_start|>user\nHi<|im_end|>\n","reward_model":{"ground_truth":"x"}})");
  EXPECT_FALSE(r.is_chat());
  EXPECT_TRUE(r.messages.empty());
  EXPECT_EQ(r.text, "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(DatasetLine, SimpleProblemAnswerLine) {
  const PromptRecord r = parse(R"({"problem": "What is $1+1$?", "answer": "2"})", 4);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "What is $1+1$?");
  EXPECT_EQ(r.ground_truth, "2");
  EXPECT_EQ(r.data_source, "f");  // the file's stem
  EXPECT_EQ(r.index, "4");        // the ordinal
  EXPECT_EQ(r.uid, prompt_uid("f", "4"));
}

TEST(DatasetLine, NumericGroundTruthsBecomeText) {
  const auto truth = [](const std::string& value) {
    return parse(R"({"problem":"q","answer":)" + value + "}").ground_truth;
  };
  EXPECT_EQ(truth("34"), "34");
  EXPECT_EQ(truth("-3"), "-3");
  EXPECT_EQ(truth("0"), "0");
  EXPECT_EQ(truth("18446744073709551615"), "18446744073709551615");  // uint64 max, exactly
  EXPECT_EQ(truth("-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(truth("34.0"), "34");   // pandas' float form of an integer column
  EXPECT_EQ(truth("-0.0"), "0");
  EXPECT_EQ(truth("0.5"), "0.5");   // shortest round-trip text, not 0.500000
  EXPECT_EQ(truth("0.1"), "0.1");
  EXPECT_EQ(truth("-2.25"), "-2.25");
  EXPECT_EQ(truth("1e-9"), "1e-09");
  EXPECT_EQ(truth("1e20"), "1e+20");  // beyond 2^53 a float names no single integer
  EXPECT_EQ(truth("\"  3 \""), "  3 ");  // strings are kept byte for byte
}

TEST(DatasetLine, IndexFormsAndDefaults) {
  const auto index = [](const std::string& extra, int64_t ordinal = 9) {
    return parse_prompt_line(R"({"problem":"q","answer":"1")" + extra + "}", "f.jsonl", 1, ordinal, "f").index;
  };
  EXPECT_EQ(index(R"(,"extra_info":{"index":12})"), "12");
  EXPECT_EQ(index(R"(,"extra_info":{"index":-1})"), "-1");
  EXPECT_EQ(index(R"(,"extra_info":{"index":3.0})"), "3");
  EXPECT_EQ(index(R"(,"extra_info":{"index":"abc"})"), "abc");
  EXPECT_EQ(index(R"(,"extra_info":{"index":""})"), "9");      // empty: the ordinal
  EXPECT_EQ(index(R"(,"extra_info":{"index":null})"), "9");    // null: absent
  EXPECT_EQ(index(R"(,"extra_info":{"split":"train"})"), "9");
  EXPECT_EQ(index(R"(,"extra_info":null)"), "9");
  EXPECT_EQ(index(""), "9");
  // Text and number of the same value are the same index (the same uid).
  EXPECT_EQ(index(R"(,"extra_info":{"index":"12"})"), index(R"(,"extra_info":{"index":12})"));
}

TEST(DatasetLine, DataSourceDefaultsToTheFileStem) {
  EXPECT_EQ(parse(R"({"problem":"q","answer":"1","data_source":"gsm8k"})").data_source, "gsm8k");
  EXPECT_EQ(parse(R"({"problem":"q","answer":"1","data_source":""})").data_source, "f");
  EXPECT_EQ(parse(R"({"problem":"q","answer":"1","data_source":null})").data_source, "f");
}

TEST(DatasetLine, VerlFieldsWinOverSimpleOnes) {
  const PromptRecord r = parse(
      R"({"prompt":[{"role":"user","content":"from prompt"}],"problem":"from problem",)"
      R"("reward_model":{"ground_truth":"from reward_model"},"answer":"from answer"})");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "from prompt");
  EXPECT_EQ(r.ground_truth, "from reward_model");
  // A null prompt counts as absent, so problem is used.
  EXPECT_EQ(parse(R"({"prompt":null,"problem":"p","answer":"1"})").messages.at(0).content, "p");
}

TEST(DatasetLine, UnknownFieldsAndAbilityAreIgnored) {
  const PromptRecord r = parse(
      R"({"problem":"q","answer":"1","ability":["not","a","string"],"solution":{"x":1},"id":5})");
  EXPECT_EQ(r.ground_truth, "1");
}

TEST(DatasetLine, EscapesAreDecodedToUtf8) {
  const PromptRecord r = parse(R"({"problem":"Caf\u00e9 \u2212 \ud83d\ude00 \\frac{1}{2} \"q\"\n","answer":"\u221a2"})");
  EXPECT_EQ(r.messages.at(0).content, "Caf\xC3\xA9 \xE2\x88\x92 \xF0\x9F\x98\x80 \\frac{1}{2} \"q\"\n");
  EXPECT_EQ(r.ground_truth, "\xE2\x88\x9A" "2");
  // pandas' to_json writes "/" as "\/".
  EXPECT_EQ(parse(R"({"problem":"a\/b","answer":"1"})").messages.at(0).content, "a/b");
}

TEST(DatasetLine, RewardModelWithoutGroundTruthIsAnErrorEvenWithAnswer) {
  EXPECT_EQ(error_of(R"({"problem":"q","reward_model":{"style":"rule"},"answer":"1"})"),
            "dir/f.jsonl:7: field reward_model.ground_truth: missing");
}

struct BadLine {
  const char* line;
  const char* message;  // after "dir/f.jsonl:7: "
};

const BadLine kBadLines[] = {
    {R"(["a"])", "expected a JSON object, got array"},
    {R"("just text")", "expected a JSON object, got string"},
    {R"(42)", "expected a JSON object, got number"},
    {R"(null)", "expected a JSON object, got null"},
    {R"({"answer":"1"})", "missing prompt: expected field prompt (verl) or problem"},
    {R"({"prompt":null,"answer":"1"})", "missing prompt: expected field prompt (verl) or problem"},
    {R"({"prompt":[],"answer":"1"})", "field prompt: empty list of messages"},
    {R"({"prompt":"","answer":"1"})", "field prompt: empty prompt"},
    {R"({"prompt":5,"answer":"1"})", "field prompt: expected a list of messages or a string, got number"},
    {R"({"prompt":{"role":"user","content":"x"},"answer":"1"})",
     "field prompt: expected a list of messages or a string, got object"},
    {R"({"prompt":["hi"],"answer":"1"})", R"(field prompt[0]: expected a message {"role", "content"}, got string)"},
    {R"({"prompt":[{"role":"user","content":"a"},{"content":"b"}],"answer":"1"})", "field prompt[1].role: missing"},
    {R"({"prompt":[{"role":3,"content":"a"}],"answer":"1"})", "field prompt[0].role: expected a string, got number"},
    {R"({"prompt":[{"role":"","content":"a"}],"answer":"1"})", "field prompt[0].role: empty role"},
    {R"({"prompt":[{"role":"user"}],"answer":"1"})", "field prompt[0].content: missing"},
    {R"({"prompt":[{"role":"user","content":null}],"answer":"1"})", "field prompt[0].content: missing"},
    {R"({"prompt":[{"role":"user","content":["a"]}],"answer":"1"})",
     "field prompt[0].content: expected a string, got array"},
    {R"({"problem":5,"answer":"1"})", "field problem: expected a string, got number"},
    {R"({"problem":"","answer":"1"})", "field problem: empty problem"},
    {R"({"problem":"q"})", "missing ground truth: expected field reward_model.ground_truth (verl) or answer"},
    {R"({"problem":"q","answer":null})", "missing ground truth: expected field reward_model.ground_truth (verl) or answer"},
    {R"({"problem":"q","reward_model":"7"})", "field reward_model: expected an object, got string"},
    {R"({"problem":"q","reward_model":{}})", "field reward_model.ground_truth: missing"},
    {R"({"problem":"q","reward_model":{"ground_truth":null}})", "field reward_model.ground_truth: missing"},
    {R"({"problem":"q","reward_model":{"ground_truth":["1","2"]}})",
     "field reward_model.ground_truth: expected a string or a number, got array"},
    {R"({"problem":"q","reward_model":{"ground_truth":true}})",
     "field reward_model.ground_truth: expected a string or a number, got boolean"},
    {R"({"problem":"q","reward_model":{"ground_truth":" \t"}})", "field reward_model.ground_truth: empty ground truth"},
    {R"({"problem":"q","answer":{}})", "field answer: expected a string or a number, got object"},
    {R"({"problem":"q","answer":""})", "field answer: empty ground truth"},
    {R"({"problem":"q","answer":"1","data_source":3})", "field data_source: expected a string, got number"},
    {R"({"problem":"q","answer":"1","extra_info":[]})", "field extra_info: expected an object, got array"},
    {R"({"problem":"q","answer":"1","extra_info":{"index":1.5}})",
     "field extra_info.index: expected a string or an integer, got number"},
    {R"({"problem":"q","answer":"1","extra_info":{"index":true}})",
     "field extra_info.index: expected a string or an integer, got boolean"},
    {R"({"problem":"q","answer":"1","extra_info":{"index":{"a":1}}})",
     "field extra_info.index: expected a string or an integer, got object"},
};

TEST(DatasetLine, EveryMalformedFormNamesFileLineAndField) {
  for (const BadLine& bad : kBadLines) {
    SCOPED_TRACE(bad.line);
    EXPECT_EQ(error_of(bad.line), std::string("dir/f.jsonl:7: ") + bad.message);
  }
}

TEST(DatasetLine, InvalidJsonNamesTheColumn) {
  const std::string truncated = error_of(R"({"problem": "x", "answer": "1")");
  EXPECT_EQ(truncated.rfind("dir/f.jsonl:7: invalid JSON: column 31: syntax error", 0), 0u) << truncated;
  const std::string trailing = error_of(R"({"problem": "x", "answer": "1"} x)");
  EXPECT_EQ(trailing.rfind("dir/f.jsonl:7: invalid JSON: column ", 0), 0u) << trailing;
  const std::string single_quotes = error_of(R"({'problem': 'x'})");
  EXPECT_EQ(single_quotes.rfind("dir/f.jsonl:7: invalid JSON: column 2", 0), 0u) << single_quotes;
  // nlohmann rejects NaN, which Python's json.dumps writes by default.
  EXPECT_EQ(error_of(R"({"problem":"q","answer":NaN})").rfind("dir/f.jsonl:7: invalid JSON: ", 0), 0u);
  // Two JSON objects on one line (a lost newline).
  EXPECT_EQ(error_of(R"({"problem":"a","answer":"1"}{"problem":"b","answer":"2"})").rfind("dir/f.jsonl:7: invalid JSON: ", 0), 0u);
}

TEST(DatasetLine, InvalidUtf8IsAnError) {
  const std::string msg = error_of("{\"problem\":\"caf\xE9\",\"answer\":\"1\"}");  // Latin-1 byte
  EXPECT_EQ(msg.rfind("dir/f.jsonl:7: invalid JSON: ", 0), 0u) << msg;
}

TEST(PromptUid, IsAPureFunctionOfSourceAndIndex) {
  EXPECT_EQ(prompt_uid("math_dapo", "1"), prompt_uid("math_dapo", "1"));
  EXPECT_NE(prompt_uid("math_dapo", "1"), prompt_uid("math_dapo", "2"));
  EXPECT_NE(prompt_uid("math_dapo", "1"), prompt_uid("aime24", "1"));
  EXPECT_NE(prompt_uid("ab", "c"), prompt_uid("a", "bc"));  // no ambiguity at the boundary
  EXPECT_NE(prompt_uid("a", "b"), prompt_uid("b", "a"));
  EXPECT_NE(prompt_uid("", ""), prompt_uid("", "0"));
  // Neither the file nor the line matter: moving a line keeps its samples.
  const std::string line = R"({"problem":"q","answer":"1","data_source":"s","extra_info":{"index":5}})";
  EXPECT_EQ(parse_prompt_line(line, "a.jsonl", 1, 0, "a").uid, parse_prompt_line(line, "b/c.jsonl", 99, 42, "c").uid);
  // Pinned: the uid is part of the checkpoint and dump formats. If this
  // changes on purpose, resumed runs sample differently: say so in the notes.
  EXPECT_EQ(prompt_uid("math_dapo", "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"), 0xB8A73760A6698E37ull);
  // (Computed independently from the documented formula by a Python transcription.)
}

}  // namespace
}  // namespace dapo::data
