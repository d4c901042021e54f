// `dapo verify` as users run it: files in and out, stdin/stdout, the summary
// line on stderr, and exit code 2 with a file:line message on bad input.
#include <gtest/gtest.h>

#include "apps/cli_test_util.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

using Result = dapo::test::CliResult;

Result run(const std::string& args) {
  const std::string cmd = std::string(DAPO_BINARY_DIR) + "/dapo " + args;
  return dapo::test::run_shell(cmd);
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class VerifyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dapo_verify_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }
  fs::path dir_;
};

TEST_F(VerifyCli, ScoresAFileAndPrintsASummary) {
  const auto in = write("r.jsonl",
                        "{\"response\":\"\\\\boxed{0.5}\",\"ground_truth\":\"\\\\frac{1}{2}\",\"uid\":\"a\"}\n"
                        "{\"response\":\"Answer: 4\",\"reward_model\":{\"ground_truth\":\"5\"}}\n"
                        "{\"response\":\"no answer\",\"ground_truth\":\"5\"}\n"
                        "{\"response\":\"\\\\boxed{5}\",\"ground_truth\":5}\n");
  const auto out = dir_ / "s.jsonl";
  const Result r = run("verify --input " + in.string() + " --output " + out.string() + " --threads 3 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "verify: 4 responses, accuracy 0.5000 (reward.verifier = symbolic)\n");
  EXPECT_EQ(read(out),
            "{\"response\":\"\\\\boxed{0.5}\",\"ground_truth\":\"\\\\frac{1}{2}\",\"uid\":\"a\",\"score\":1.0,"
            "\"acc\":true,\"pred\":\"0.5\"}\n"
            "{\"response\":\"Answer: 4\",\"reward_model\":{\"ground_truth\":\"5\"},\"score\":-1.0,\"acc\":false,"
            "\"pred\":\"4\"}\n"
            "{\"response\":\"no answer\",\"ground_truth\":\"5\",\"score\":-1.0,\"acc\":false,\"pred\":\"\"}\n"
            "{\"response\":\"\\\\boxed{5}\",\"ground_truth\":5,\"score\":1.0,\"acc\":true,\"pred\":\"5\"}\n");
}

// reward.verifier = math_dapo: the paper's reward (the last "Answer:" line,
// normalised, compared as text; \boxed{} is not read).
TEST_F(VerifyCli, TheRunsVerifierIsChosenByReward) {
  const auto in = write("r.jsonl",
                        "{\"response\":\"\\\\boxed{0.5}\",\"ground_truth\":\"0.5\"}\n"
                        "{\"response\":\"so\\nAnswer: $1,000$\",\"ground_truth\":\"1000\"}\n"
                        "{\"response\":\"Answer: 0.5\",\"ground_truth\":\"\\\\frac{1}{2}\"}\n");
  const Result r = run("verify --input " + in.string() + " --reward.verifier=math_dapo 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output,
            "{\"response\":\"\\\\boxed{0.5}\",\"ground_truth\":\"0.5\",\"score\":-1.0,\"acc\":false,"
            "\"pred\":\"[INVALID]\"}\n"
            "{\"response\":\"so\\nAnswer: $1,000$\",\"ground_truth\":\"1000\",\"score\":1.0,\"acc\":true,"
            "\"pred\":\"1000\"}\n"
            "{\"response\":\"Answer: 0.5\",\"ground_truth\":\"\\\\frac{1}{2}\",\"score\":-1.0,\"acc\":false,"
            "\"pred\":\"0.5\"}\n"
            "verify: 3 responses, accuracy 0.3333 (reward.verifier = math_dapo)\n");
  const Result bad = run("verify --input " + in.string() + " --reward.verifier=paper 2>&1");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("'paper' is not one of symbolic|math_dapo"), std::string::npos) << bad.output;
}

TEST_F(VerifyCli, StdinToStdout) {
  const auto in = write("r.jsonl", "{\"response\":\"\\\\boxed{7}\",\"ground_truth\":\"7\"}\n");
  const Result r = run("verify --input - < " + in.string() + " 2>/dev/null");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.output,
            "{\"response\":\"\\\\boxed{7}\",\"ground_truth\":\"7\",\"score\":1.0,\"acc\":true,\"pred\":\"7\"}\n");
}

TEST_F(VerifyCli, BadInputIsAUserError) {
  const auto bad = write("bad.jsonl", "{\"response\":\"x\",\"ground_truth\":\"1\"}\n{oops\n");
  Result r = run("verify --input " + bad.string() + " 2>&1 >/dev/null");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("dapo verify: error: " + bad.string() + ":2: malformed JSON"), std::string::npos)
      << r.output;

  const auto missing = write("missing.jsonl", "{\"response\":\"x\"}\n");
  r = run("verify --input " + missing.string() + " 2>&1 >/dev/null");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(missing.string() + ":1: missing field 'ground_truth'"), std::string::npos) << r.output;

  r = run("verify --input " + (dir_ / "nope.jsonl").string() + " 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("nope.jsonl: cannot open the input file"), std::string::npos) << r.output;

  r = run("verify 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("needs --input"), std::string::npos) << r.output;

  r = run("verify --input " + bad.string() + " --threads -1 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--threads must be >= 0"), std::string::npos) << r.output;

  r = run("verify --input " + bad.string() + " --output " + (dir_ / "no/such/dir.jsonl").string() + " 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("cannot open the output file"), std::string::npos) << r.output;
}

TEST_F(VerifyCli, HelpListsTheOptions) {
  const Result r = run("verify --help 2>&1");
  EXPECT_EQ(r.code, 0);
  for (const char* option : {"--input", "--output", "--threads"})
    EXPECT_NE(r.output.find(option), std::string::npos) << option;
}

}  // namespace
