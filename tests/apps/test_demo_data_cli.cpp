// `dapo demo-data` as users run it: the shipped inputs/demo/*.jsonl (and,
// where python3 is installed, tokenizer.json and model/config.json) are
// exactly what the commands in inputs/demo/README.md write (so they cannot
// drift from the generator), the same seed writes the same bytes, and bad
// command lines end with exit code 2 and a message naming the option.
#include <gtest/gtest.h>

#include "apps/cli_test_util.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

using Result = dapo::test::CliResult;

Result run(const std::string& args) {
  const std::string cmd = std::string(DAPO_BINARY_DIR) + "/dapo " + args + " 2>&1";
  return dapo::test::run_shell(cmd);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class DemoDataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dapo_demo_data_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string out(const std::string& sub) const { return (dir_ / sub).string(); }
  fs::path dir_;
};

TEST_F(DemoDataCli, ShippedFilesAreWhatTheDocumentedCommandWrites) {
  const fs::path source = DAPO_SOURCE_DIR;
  const std::string readme = read_file(source / "inputs/demo/README.md");
  // The one documented line that writes into inputs/demo.
  static const std::regex line_re(R"((?:^|\n)build/dapo demo-data --out inputs/demo( [^\n]*)\n)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, line_re)) << "no 'build/dapo demo-data --out inputs/demo ...' line";
  const std::string options = m[1].str();
  const Result r = run("demo-data --out " + out("shipped") + options);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* name : {"train.jsonl", "val.jsonl", "sft.jsonl"}) {
    const std::string shipped = read_file(source / "inputs/demo" / name);
    EXPECT_EQ(read_file(dir_ / "shipped" / name), shipped)
        << "inputs/demo/" << name << " differs from the output of `build/dapo demo-data --out inputs/demo" << options
        << "`: regenerate the demo files with the commands of inputs/demo/README.md";
    EXPECT_LT(shipped.size(), 1u << 20) << name;
  }
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// The tokenizer and model config: the README's corpus command, then its
// make_tokenizer.py command, written elsewhere and compared (needs python3).
TEST_F(DemoDataCli, ShippedTokenizerAndConfigAreWhatTheDocumentedCommandsWrite) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  const fs::path source = DAPO_SOURCE_DIR;
  const std::string readme = read_file(source / "inputs/demo/README.md");
  static const std::regex corpus_re(R"((?:^|\n)build/dapo demo-data --out (/tmp/[^ \n]+)( [^\n]*)(?=\n))");
  static const std::regex script_re(R"((?:^|\n)python3 (inputs/demo/make_tokenizer\.py) ([^\n]*)\n)");
  std::smatch script;
  ASSERT_TRUE(std::regex_search(readme, script, script_re)) << "no 'python3 inputs/demo/make_tokenizer.py' line";
  std::string args = script[2].str();
  // Every corpus the README writes under /tmp, written here instead.
  int corpora = 0;
  for (std::sregex_iterator it(readme.begin(), readme.end(), corpus_re), end; it != end; ++it, ++corpora) {
    const std::string sub = "corpus" + std::to_string(corpora);
    const Result c = run("demo-data --out " + out(sub) + (*it)[2].str());
    ASSERT_EQ(c.code, 0) << c.output;
    args = replace_all(args, (*it)[1].str() + "/", out(sub) + "/");
  }
  ASSERT_GT(corpora, 0) << "no 'build/dapo demo-data --out /tmp/...' line";
  args = replace_all(args, "inputs/demo/", (source / "inputs/demo").string() + "/");
  const std::string cmd =
      "python3 " + (source / script[1].str()).string() + " --out " + out("made") + " " + args + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const char* name : {"tokenizer.json", "model/config.json"})
    EXPECT_EQ(read_file(dir_ / "made" / name), read_file(source / "inputs/demo" / name))
        << "inputs/demo/" << name << " differs from what the commands of inputs/demo/README.md write";
}

TEST_F(DemoDataCli, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::string sizes = " --train 30 --val 7 --sft 20 --difficulty 4";
  ASSERT_EQ(run("demo-data --seed 9 --out " + out("a") + sizes).code, 0);
  ASSERT_EQ(run("demo-data --seed 9 --out " + out("b") + sizes).code, 0);
  const Result c = run("demo-data --seed 10 --out " + out("c") + sizes);
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(c.output, "demo-data: 30 train, 7 val, 20 sft problems (compact format, compact solutions) -> " + out("c") + ": " +
                          std::to_string(fs::file_size(dir_ / "c/train.jsonl")) + ", " +
                          std::to_string(fs::file_size(dir_ / "c/val.jsonl")) + ", " +
                          std::to_string(fs::file_size(dir_ / "c/sft.jsonl")) + " bytes\n");
  for (const char* name : {"train.jsonl", "val.jsonl", "sft.jsonl"}) {
    EXPECT_EQ(read_file(dir_ / "a" / name), read_file(dir_ / "b" / name)) << name;
    EXPECT_NE(read_file(dir_ / "a" / name), read_file(dir_ / "c" / name)) << name;
  }
  const std::string train = read_file(dir_ / "a/train.jsonl");
  EXPECT_EQ(std::count(train.begin(), train.end(), '\n'), 30);
  // An existing directory is written into, files replaced.
  ASSERT_EQ(run("demo-data --seed 10 --out " + out("a") + sizes).code, 0);
  EXPECT_EQ(read_file(dir_ / "a/train.jsonl"), read_file(dir_ / "c/train.jsonl"));
}

// The command of jobs/demo_gpu.sh (smaller): columns solutions in the SFT
// file, the same problems and prompt files as with compact solutions.
TEST_F(DemoDataCli, ColumnsSolutionsForTheGpuDemo) {
  const std::string args = "demo-data --seed 2026 --train 5 --val 3 --sft 4 --difficulty 6";
  const Result r = run(args + " --solution columns --out " + out("g"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(compact format, columns solutions)"), std::string::npos) << r.output;
  ASSERT_EQ(run(args + " --out " + out("c")).code, 0);
  EXPECT_EQ(read_file(dir_ / "g/train.jsonl"), read_file(dir_ / "c/train.jsonl"));
  EXPECT_EQ(read_file(dir_ / "g/val.jsonl"), read_file(dir_ / "c/val.jsonl"));
  const std::string sft = read_file(dir_ / "g/sft.jsonl");
  EXPECT_NE(sft, read_file(dir_ / "c/sft.jsonl"));
  EXPECT_EQ(std::count(sft.begin(), sft.end(), '\n'), 4);
  // Each response: a header line per operation, one line per column, "= r", "Answer: N".
  static const std::regex response_re(R"re("response":"(\d+ [-+*] \d+\\n(\d+ [-+*] \d[ +\-\d]* = \d+\\n)+= \d+\\n)+Answer: \d+")re");
  EXPECT_EQ(std::distance(std::sregex_iterator(sft.begin(), sft.end(), response_re), std::sregex_iterator()), 4)
      << sft;
}

TEST_F(DemoDataCli, DapoFormatWrapsTheProblemInTheInstruction) {
  ASSERT_EQ(run("demo-data --seed 1 --train 2 --val 1 --sft 1 --format dapo --out " + out("d")).code, 0);
  ASSERT_EQ(run("demo-data --seed 1 --train 2 --val 1 --sft 1 --format compact --out " + out("c")).code, 0);
  const std::string dapo = read_file(dir_ / "d/val.jsonl");
  const std::string compact = read_file(dir_ / "c/val.jsonl");
  EXPECT_NE(dapo.find("\"content\":\"Solve the following math problem step by step. "), std::string::npos) << dapo;
  EXPECT_NE(dapo.find("\\n\\nRemember to put your answer on its own line after \\\"Answer:\\\".\"}]"),
            std::string::npos)
      << dapo;
  EXPECT_EQ(compact.find("Solve the following"), std::string::npos) << compact;
}

TEST_F(DemoDataCli, BadCommandLinesSayWhatIsWrong) {
  const auto expect_error = [&](const std::string& args, const std::string& message) {
    const Result r = run("demo-data " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("dapo demo-data: error: " + message), std::string::npos) << args << "\n" << r.output;
  };
  const std::string o = " --out " + out("x");
  expect_error("--seed 1", "command line: dapo demo-data needs --out DIR");
  expect_error(o, "command line: dapo demo-data needs --seed S");
  expect_error(o + " --seed -1", "command line: --seed must be an integer in 0..2^64-1, not '-1'");
  expect_error(o + " --seed 1x", "command line: --seed must be an integer in 0..2^64-1, not '1x'");
  expect_error(o + " --seed 18446744073709551616",
               "command line: --seed must be an integer in 0..2^64-1, not '18446744073709551616'");
  expect_error(o + " --seed 1 --train 0", "command line: --train must be in 1..10000000, not 0");
  expect_error(o + " --seed 1 --val -3", "command line: --val must be in 1..10000000, not -3");
  expect_error(o + " --seed 1 --sft 10000001", "command line: --sft must be in 1..10000000, not 10000001");
  expect_error(o + " --seed 1 --difficulty 9", "difficulty 9: must be 1..6");
  expect_error(o + " --seed 1 --solution long", "solution style 'long': must be compact or columns");
  expect_error(o + " --seed 1 --format long", "prompt format 'long': must be dapo or compact");
  expect_error(o + " --seed 1 --difficulty 1 --train 20000",
               "demo data: train problem ");  // too few distinct one-digit sums
  expect_error(o + " --seed 1 --rollout.n=4", "command line: dapo demo-data does not take '--rollout.n=4'");
  EXPECT_FALSE(fs::exists(dir_ / "x"));  // nothing written on a bad command line

  // A file where the directory should be.
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  expect_error("--seed 1 --out " + out("file"), out("file") + ": cannot create the directory");
  expect_error("--seed 1 --out " + out("file/sub"), out("file/sub") + ": cannot create the directory");
}

TEST_F(DemoDataCli, HelpListsTheOptions) {
  const Result r = run("demo-data --help");
  EXPECT_EQ(r.code, 0);
  for (const char* option : {"--out", "--seed", "--train", "--val", "--sft", "--difficulty", "--format", "--solution"})
    EXPECT_NE(r.output.find(option), std::string::npos) << option << "\n" << r.output;
  const Result top = run("--help");
  EXPECT_NE(top.output.find("  demo-data "), std::string::npos) << top.output;
}

}  // namespace
