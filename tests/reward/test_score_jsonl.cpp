// verify_jsonl: fields added, others passed through in order, input order
// kept on many threads, verl's nested ground truth, and every error message.
#include "dapo/reward/score_jsonl.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "dapo/core/error.h"

namespace dapo::reward {
namespace {

std::string run(const std::string& input, int threads = 2, VerifySummary* summary = nullptr) {
  std::istringstream in(input);
  std::ostringstream out;
  const VerifySummary s = verify_jsonl(in, out, "R.jsonl", threads);
  if (summary) *summary = s;
  return out.str();
}

std::string error_of(const std::string& input) {
  try {
    run(input);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(ScoreJsonl, AddsFieldsAndKeepsTheRest) {
  VerifySummary s;
  const std::string out = run(
      "{\"id\":7,\"response\":\"so \\\\boxed{\\\\frac12}\",\"ground_truth\":\"0.5\",\"zeta\":[1,2]}\n"
      "{\"zz\":null,\"response\":\"Answer: 3\",\"reward_model\":{\"ground_truth\":\"4\",\"style\":\"rule\"}}\n",
      2, &s);
  EXPECT_EQ(out,
            "{\"id\":7,\"response\":\"so \\\\boxed{\\\\frac12}\",\"ground_truth\":\"0.5\",\"zeta\":[1,2],"
            "\"score\":1.0,\"acc\":true,\"pred\":\"\\\\frac12\"}\n"
            "{\"zz\":null,\"response\":\"Answer: 3\",\"reward_model\":{\"ground_truth\":\"4\",\"style\":\"rule\"},"
            "\"score\":-1.0,\"acc\":false,\"pred\":\"3\"}\n");
  EXPECT_EQ(s.responses, 2);
  EXPECT_EQ(s.correct, 1);
  EXPECT_DOUBLE_EQ(s.accuracy(), 0.5);
}

TEST(ScoreJsonl, NumericGroundTruthBlankLinesAndCrLf) {
  VerifySummary s;
  const std::string out = run("\n{\"response\":\"\\\\boxed{42}\",\"ground_truth\":42}\r\n   \n", 1, &s);
  EXPECT_EQ(out, "{\"response\":\"\\\\boxed{42}\",\"ground_truth\":42,\"score\":1.0,\"acc\":true,\"pred\":\"42\"}\n");
  EXPECT_EQ(s.responses, 1);
  EXPECT_EQ(run(""), "");
}

TEST(ScoreJsonl, OutputKeepsInputOrderOnManyThreads) {
  std::string in, expected_acc;
  for (int i = 0; i < 20000; ++i) {
    const bool right = (i * 7919) % 3 == 0;
    in += "{\"i\":" + std::to_string(i) + ",\"response\":\"\\\\boxed{" + std::to_string(i) +
          "}\",\"ground_truth\":\"" + std::to_string(right ? i : i + 1) + "\"}\n";
    expected_acc += right ? '1' : '0';
  }
  VerifySummary s;
  const std::string out = run(in, 8, &s);
  std::istringstream lines(out);
  std::string line, got_acc;
  int i = 0;
  while (std::getline(lines, line)) {
    ASSERT_EQ(line.rfind("{\"i\":" + std::to_string(i) + ",", 0), 0u) << line;
    got_acc += line.find("\"acc\":true") != std::string::npos ? '1' : '0';
    ++i;
  }
  EXPECT_EQ(i, 20000);
  EXPECT_EQ(got_acc, expected_acc);
  EXPECT_EQ(s.responses, 20000);
}

TEST(ScoreJsonl, ErrorsNameFileLineAndField) {
  const std::string ok = "{\"response\":\"x\",\"ground_truth\":\"1\"}\n";
  EXPECT_NE(error_of(ok + "{\"response\": \n").find("R.jsonl:2: malformed JSON"), std::string::npos);
  EXPECT_NE(error_of(ok + ok + "[1,2]\n").find("R.jsonl:3: expected a JSON object, got array"), std::string::npos);
  EXPECT_EQ(error_of("{\"ground_truth\":\"1\"}\n"), "R.jsonl:1: missing field 'response'");
  EXPECT_EQ(error_of("{\"response\":5,\"ground_truth\":\"1\"}\n"),
            "R.jsonl:1: field 'response' must be a string, not number");
  EXPECT_EQ(error_of("{\"response\":\"x\"}\n"),
            "R.jsonl:1: missing field 'ground_truth' (or 'reward_model.ground_truth')");
  EXPECT_EQ(error_of("{\"response\":\"x\",\"reward_model\":{}}\n"),
            "R.jsonl:1: missing field 'ground_truth' (or 'reward_model.ground_truth')");
  EXPECT_EQ(error_of("{\"response\":\"x\",\"ground_truth\":[\"1\"]}\n"),
            "R.jsonl:1: field 'ground_truth' must be a string or a number, not array");
  // nlohmann reports a number beyond double's range as out_of_range, not as
  // a parse error: still a bad line, not a crash of a worker thread.
  EXPECT_EQ(error_of(ok + ok + ok + "{\"response\":\"x\",\"ground_truth\":1e999}\n"),
            "R.jsonl:4: malformed JSON ([json.exception.out_of_range.406] number overflow parsing '1e999')");
  // The first bad line is reported, whichever thread met it.
  EXPECT_NE(error_of(ok + "\n" + "bad\n" + "worse\n").find("R.jsonl:3:"), std::string::npos);
  // Bytes after a NUL that follows a complete object are not dropped
  // (nlohmann's parser would end the input at the NUL): the line is refused.
  EXPECT_EQ(error_of(ok + "{\"response\":\"x\",\"ground_truth\":\"1\"}" + std::string(1, '\0') + "{\"more\": 1}\n"),
            "R.jsonl:2: a NUL byte at column 36 (not valid JSON)");
}

}  // namespace
}  // namespace dapo::reward
