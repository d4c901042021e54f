// `dapo sft` as users run it: on a tiny generated data set with the demo's
// config-only model directory (random init) it writes metrics.jsonl (one
// line per step, the documented keys), the resolved config.ini, the final
// checkpoint and `latest`, and the checkpoint exports with `dapo
// export-hf`; data.train_files works without --data; the same losses come
// out under mpirun with dp = 2; bad data lines, missing data and bad models
// are reported with exit code 2 and FILE:LINE; a finished run's model in
// checkpoint.dir is kept: the same run again has nothing to do, a longer
// one and checkpoint.resume = never or PATH are refused, nothing written.
#include <gtest/gtest.h>

#include "apps/cli_test_util.h"
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dapo/core/config.h"
#include "io/io_test_util.h"

namespace {

namespace fs = std::filesystem;
using dapo::test::TempDir;
using dapo::test::write_text;
using Json = nlohmann::ordered_json;

using Result = dapo::test::CliResult;
using dapo::test::read_jsonl;
using dapo::test::run_command;

std::string dapo() { return dapo::test::dapo_binary(); }
std::string demo(const std::string& name) { return std::string(DAPO_SOURCE_DIR) + "/inputs/demo/" + name; }

// n chat pairs in the demo's words (the demo tokenizer covers them).
std::string pairs(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const int a = 2 + i % 7, b = 1 + i % 5;
    s += Json{{"prompt", Json::array({Json{{"role", "user"}, {"content", "Tom has " + std::to_string(a) +
                                                                               " apples. He buys " + std::to_string(b) +
                                                                               " more. How many apples does he have now?"}}})},
              {"response", std::to_string(a) + " + " + std::to_string(b) + " = " + std::to_string(a + b) +
                               "\nAnswer: " + std::to_string(a + b)}}
             .dump() +
         "\n";
  }
  return s;
}

std::string args_of(const TempDir& dir, const std::string& run, const std::string& model = demo("model")) {
  return "sft --model.path=" + model + " --model.tokenizer=" + demo("tokenizer.json") +
         " --train.train_batch_size=4 --train.ppo_mini_batch_size=4 --train.total_steps=3 --optim.lr=1e-3 --optim.warmup_steps=0 --log.dir=" +
         dir.file(run + "/logs") + " --checkpoint.dir=" + dir.file(run + "/ckpt");
}

TEST(SftCli, TrainsWritesMetricsCheckpointAndExports) {
  TempDir dir;
  write_text(dir.file("sft.jsonl"), pairs(10));
  Result r = run_command(dapo() + args_of(dir, "a") + " --data " + dir.file("sft.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sft step 3/3"), std::string::npos) << r.output;
  const std::vector<Json> lines = read_jsonl(dir.file("a/logs/metrics.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], int(i) + 1);
    for (const char* key : {"train/loss", "actor/grad_norm", "actor/lr", "perf/throughput", "timing_s/step"})
      EXPECT_TRUE(lines[i].contains(key)) << key;
    EXPECT_GT(lines[i]["train/response_tokens"].get<int>(), 0);
  }
  EXPECT_NEAR(lines[0]["train/loss"].get<double>(), std::log(392.0), 0.2);  // random init: about uniform
  EXPECT_LT(lines[2]["train/loss"].get<double>(), lines[0]["train/loss"].get<double>());
  // The resolved configuration reads back with the command line's values.
  const dapo::Config saved = dapo::load_config(dir.file("a/logs/config.ini"), {});
  EXPECT_EQ(saved.train.total_steps, 3);
  EXPECT_EQ(saved.train.train_batch_size, 4);
  EXPECT_EQ(dapo::test::read_text(dir.file("a/ckpt/latest")), "sft_final.h5\n");
  ASSERT_TRUE(fs::exists(dir.file("a/ckpt/sft_final.h5")));
  EXPECT_FALSE(fs::exists(dir.file("a/ckpt/sft_final.h5.partial")));
  r = run_command(dapo() + "export-hf --checkpoint " + dir.file("a/ckpt/sft_final.h5") + " --output " + dir.file("hf"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir.file("hf/model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("hf/config.json")));

  // The checkpoint is a model.path to continue from: its first loss is the
  // loss after the first run's three updates, below the fresh model's.
  r = run_command(dapo() + args_of(dir, "b", dir.file("a/ckpt/sft_final.h5")) + " --data " + dir.file("sft.jsonl") +
                  " --train.total_steps=1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_LT(read_jsonl(dir.file("b/logs/metrics.jsonl"))[0]["train/loss"].get<double>(),
            lines[2]["train/loss"].get<double>() + 1e-9);

  // data.train_files when --data is absent; the same data, the same run.
  r = run_command(dapo() + args_of(dir, "c") + " --data.train_files=" + dir.file("sft.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<Json> again = read_jsonl(dir.file("c/logs/metrics.jsonl"));
  ASSERT_EQ(again.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again[i]["train/loss"], lines[i]["train/loss"]);
}

TEST(SftCli, SameLossesUnderMpirunWithDp2) {
  TempDir dir;
  write_text(dir.file("sft.jsonl"), pairs(10));
  Result r = run_command(dapo() + args_of(dir, "one") + " --data " + dir.file("sft.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_command("mpirun -np 2 --oversubscribe " + dapo() + args_of(dir, "two") + " --data " + dir.file("sft.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<Json> one = read_jsonl(dir.file("one/logs/metrics.jsonl"));
  const std::vector<Json> two = read_jsonl(dir.file("two/logs/metrics.jsonl"));
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(two.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const double a = one[i]["train/loss"].get<double>(), b = two[i]["train/loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-5 * a) << "step " << i + 1;
    EXPECT_EQ(one[i]["train/response_tokens"], two[i]["train/response_tokens"]);
  }
}

TEST(SftCli, BadInputIsReportedWithFileAndLine) {
  TempDir dir;
  const std::string bad = dir.file("bad.jsonl");
  write_text(bad, pairs(2) + "{\"prompt\": \"x\"}\n");
  Result r = run_command(dapo() + args_of(dir, "x") + " --data " + bad);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dapo sft: error: " + bad + ":3: no response"), std::string::npos) << r.output;
  // Under mpirun: one line, every rank exits.
  r = run_command("mpirun -np 2 --oversubscribe " + dapo() + args_of(dir, "y") + " --data " + bad);
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.output.find(bad + ":3: no response"), r.output.rfind(bad + ":3: no response")) << r.output;
  EXPECT_NE(r.output.find(bad + ":3: no response"), std::string::npos) << r.output;

  r = run_command(dapo() + args_of(dir, "z"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("no SFT data: give --data SFT.jsonl, or data.train_files"), std::string::npos) << r.output;
  r = run_command(dapo() + args_of(dir, "z") + " --data " + dir.file("missing.jsonl"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(dir.file("missing.jsonl") + ": cannot open"), std::string::npos) << r.output;
  write_text(dir.file("ok.jsonl"), pairs(4));
  r = run_command(dapo() + args_of(dir, "z", dir.file("nope")) + " --data " + dir.file("ok.jsonl"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(dir.file("nope") + ": no such file or directory (model.path)"), std::string::npos) << r.output;
  // A pair longer than the micro-batch budget.
  r = run_command(dapo() + args_of(dir, "z") + " --data " + dir.file("ok.jsonl") + " --train.max_token_len_per_gpu=8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("train.max_token_len_per_gpu = 8"), std::string::npos) << r.output;
}

TEST(SftCli, AFinishedModelIsKept) {
  TempDir dir;
  write_text(dir.file("sft.jsonl"), pairs(10));
  const std::string args = args_of(dir, "a") + " --data " + dir.file("sft.jsonl");
  Result r = run_command(dapo() + args);
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> files;
  for (const char* f : {"a/ckpt/sft_final.h5", "a/ckpt/latest", "a/logs/metrics.jsonl", "a/logs/config.ini"})
    files.push_back(dapo::test::read_text(dir.file(f)));
  auto unchanged = [&](const std::string& what) {
    size_t i = 0;
    for (const char* f : {"a/ckpt/sft_final.h5", "a/ckpt/latest", "a/logs/metrics.jsonl", "a/logs/config.ini"})
      EXPECT_EQ(dapo::test::read_text(dir.file(f)), files[i++]) << f << " changed by " << what;
  };
  // The same run (or a shorter one) again: nothing to do.
  r = run_command(dapo() + args + " --optim.lr=2e-3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sft: nothing to do: " + dir.file("a/ckpt/sft_final.h5") +
                          " is a finished run of 3 steps, and this one plans 3"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("sft step"), std::string::npos) << r.output;
  unchanged("the same run");
  // More steps: an SFT model cannot be continued, and is not replaced.
  r = run_command("mpirun -np 2 --oversubscribe " + dapo() + args + " --train.total_steps=5");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("command line: checkpoint.dir: " + dir.file("a/ckpt") +
                          " holds a finished dapo sft model (" + dir.file("a/ckpt/sft_final.h5") +
                          ", 3 steps; this run plans 5) and checkpoint.resume = auto; dapo sft does not replace it"),
            std::string::npos)
      << r.output;
  unchanged("a longer run");
  r = run_command(dapo() + args + " --checkpoint.resume=never");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("sft_final.h5) and checkpoint.resume = never; dapo sft does not replace it"),
            std::string::npos)
      << r.output;
  unchanged("checkpoint.resume = never");
  r = run_command(dapo() + args + " --checkpoint.resume=" + dir.file("a/ckpt/sft_final.h5"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dapo sft does not resume from a checkpoint"), std::string::npos) << r.output;
  unchanged("checkpoint.resume = PATH");
  // Moved away: a fresh run.
  fs::rename(dir.file("a/ckpt/sft_final.h5"), dir.file("kept.h5"));
  r = run_command(dapo() + args + " --checkpoint.resume=never");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir.file("a/ckpt/sft_final.h5")));
}

}  // namespace
