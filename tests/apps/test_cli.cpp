// The `dapo` executable as users meet it: help texts, exit codes, and the
// error lines for bad configuration and bad command lines.
#include <gtest/gtest.h>

#include "apps/cli_test_util.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <sys/wait.h>

namespace {

using Result = dapo::test::CliResult;

Result run(const std::string& args) {
  const std::string cmd = std::string(DAPO_BINARY_DIR) + "/dapo " + args + " 2>&1";
  return dapo::test::run_shell(cmd);
}

TEST(Cli, TopLevelHelpListsEveryCommand) {
  const Result r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* c : {"train", "sft", "generate", "eval", "verify", "tokenize", "import-hf", "export-hf",
                        "inspect", "info"})
    EXPECT_NE(r.output.find(std::string("  ") + c + " "), std::string::npos) << c << "\n" << r.output;
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("frobnicate").code, 2);
}

TEST(Cli, EveryCommandHasHelpWithItsOptions) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"train", "--rollout.n=16"},       {"sft", "--data"},          {"generate", "--checkpoint"},
      {"eval", "--data"},                {"verify", "--input"},      {"tokenize", "--tokenizer"},
      {"import-hf", "--hf-dir"},         {"export-hf", "--checkpoint"}, {"inspect", "--show"},
      {"info", "--parallel.tp=1"}};
  for (const auto& [cmd, option] : expected) {
    const Result r = run(cmd + " --help");
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_NE(r.output.find(option), std::string::npos) << cmd << "\n" << r.output;
  }
}

// The memory plan of a 128-GPU job, from one process without a GPU.
TEST(Cli, InfoPrintsTheMemoryPlanOfAPlannedLaunch) {
  const std::string src = DAPO_SOURCE_DIR;
  auto info = [&](const std::string& ranks, const std::string& gib, const std::string& extra) {
    return run("info --memory --ranks " + ranks + " --gpu-gib " + gib + " --config " + src + "/inputs/dapo_base.ini," +
               src + "/inputs/dapo_32b.ini --model.path=" + src + "/inputs/shapes/qwen2.5-32b " +
               extra);
  };
  Result r = info("128", "80", "");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* part : {"tp 8 x dp 16", "whole run", "update", "generation", "KV pool", "fits: yes"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  r = info("128", "24", "--train.activation_recompute=false --optim.shard_optimizer=false");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fits: NO"), std::string::npos) << r.output;
  r = info("12", "80", "");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--ranks 12: must be a positive multiple of parallel.tp = 8"), std::string::npos) << r.output;
  // A rank count past any launch is refused by name, not wrapped to a negative dp.
  r = info("17179869184", "80", "");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("command line: --ranks 17179869184: is more than 1048576"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("-2147483648"), std::string::npos) << r.output;
  r = info("1048576", "80", "");
  EXPECT_EQ(r.code, 0) << r.output;
  // The Qwen3 presets plan from their shapes as well (Qwen3-32B: 8 of its
  // 64 query heads of 128 per rank, its q/k norms' inputs in the update).
  for (const auto& [ini, shape, ranks] : {std::tuple{"dapo_qwen3_32b", "qwen3-32b", "128"},
                                          std::tuple{"dapo_qwen3_8b", "qwen3-8b", "32"}}) {
    const Result q = run(std::string("info --memory --ranks ") + ranks + " --gpu-gib 80 --config " + src +
                         "/inputs/dapo_base.ini," + src + "/inputs/" + ini + ".ini --model.path=" + src +
                         "/inputs/shapes/" + shape);
    EXPECT_EQ(q.code, 0) << q.output;
    EXPECT_NE(q.output.find("fits: yes"), std::string::npos) << ini << "\n" << q.output;
  }
  EXPECT_NE(r.output.find("tp 8 x dp 131072"), std::string::npos) << r.output;
  r = info("128", "1e6", "");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("command line: --gpu-gib 1e+06: must be more than 0 and less than 1000000 GiB"),
            std::string::npos)
      << r.output;
}

TEST(Cli, InspectOfAMissingFileFails) {
  const Result r = run("inspect nothing.h5");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("nothing.h5: no such file"), std::string::npos) << r.output;
}

TEST(Cli, ConfigErrorsNameFileLineAndKey) {
  const auto path = (std::filesystem::temp_directory_path() / "dapo_cli_test.ini").string();
  std::ofstream(path) << "[rollout]\nn = 4\n[optim]\nlearning_rate = 1e-6\n";
  const Result r = run("train --config " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(path + ":4: unknown key 'learning_rate' in [optim]"), std::string::npos) << r.output;
  const Result bad = run("info --rollout.n=many");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("rollout.n"), std::string::npos) << bad.output;
  EXPECT_EQ(run("inspect --rollout.n=4").code, 2);  // takes no configuration
}

TEST(Cli, InfoPrintsTheResolvedConfiguration) {
  const auto saved = (std::filesystem::temp_directory_path() / "dapo_cli_saved.ini").string();
  const Result r = run("info --rollout.n=4 --save " + saved);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("world=1 tp=1 dp=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rollout]\nn = 4\n"), std::string::npos) << r.output;
  std::ifstream in(saved);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("[rollout]\nn = 4\n"), std::string::npos);
  // The saved file is a valid configuration that reads back.
  EXPECT_EQ(run("info --config " + saved).code, 0);
  std::filesystem::remove(saved);
}

}  // namespace
