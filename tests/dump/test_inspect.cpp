// `dapo inspect` on a small crafted dump whose statistics were worked out by
// hand: the exact summary, samples and JSONL text, and the command line
// (exit codes, options, output equal to the library's text).
#include "dapo/dump/inspect.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/cli_test_util.h"
#include "dump/dump_test_util.h"
#include "io/io_test_util.h"

namespace dapo::dump {
namespace {

using test::TempDir;

rl::GroupData group(int64_t uid, int64_t round, int64_t position, const std::string& source, const std::string& prompt,
                    std::vector<int32_t> prompt_ids, const std::string& truth) {
  rl::GroupData g;
  g.uid = uid;
  g.round = round;
  g.position = position;
  g.data_source = source;
  g.prompt_text = prompt;
  g.prompt_ids = std::move(prompt_ids);
  g.ground_truth = truth;
  return g;
}

void add(rl::GroupData& g, std::vector<int32_t> ids, const std::string& text, const std::string& pred, double score,
         double reward, uint8_t finish, uint8_t in_loss) {
  g.response_ids.insert(g.response_ids.end(), ids.begin(), ids.end());
  g.response_offsets.push_back(int64_t(g.response_ids.size()));
  g.response_text.push_back(text);
  g.pred.push_back(pred);
  g.score.push_back(score);
  g.acc.push_back(score > 0 ? 1 : 0);
  g.reward.push_back(reward);
  g.finish_reason.push_back(finish);
  g.in_loss.push_back(in_loss);
}

// Three groups: A and C trained (mixed), B all correct and not trained.
// Generation order (round, position): B (0, 0), A (0, 1), C (1, 0).
std::string write_known_dump(const TempDir& dir) {
  rl::GroupData a = group(7, 0, 1, "math", "1+1=?", {1, 2, 3}, "2");
  add(a, {5}, "2", "2", 1, 1, 0, 1);
  add(a, {6, 7, 8}, "3 and more", "3", -1, -1, 1, 1);
  a.advantage = {0.7071, -0.7071};
  a.old_logprobs = {-0.5f, -0.25f, -1.5f, -2.0f};
  a.sampling_logprobs = {-0.5f, -0.375f, -1.5f, -1.75f};
  rl::GroupData b = group(9, 0, 0, "gsm", "2+2=?", {4, 5}, "4");
  add(b, {9}, "4", "4", 1, 1, 0, 1);
  add(b, {9, 10}, "4.", "4", 1, 1, 0, 1);
  rl::GroupData c = group(3, 1, 0, "math", "3*3=?", {6}, "9");
  add(c, {11, 12}, "9.", "9", 1, 1, 0, 1);
  add(c, {13}, "6", "6", -1, -1.5, 1, 0);
  c.advantage = {1, -1};
  c.old_logprobs = {-0.1f, -0.2f, -0.3f};
  DumpInfo info;
  info.step = 3;
  info.config_ini = "[rollout]\nn = 2\n";
  info.n = 2;
  info.max_response_length = 3;
  const std::string path = dir.file("step_00000003.h5");
  const std::vector<rl::GroupData> trained = {a, c}, dropped = {b};
  const std::vector<rl::GroupOutcome> mixed(2, rl::GroupOutcome::mixed), uniform = {rl::GroupOutcome::all_correct};
  write_rollout_dump(path, parallel::Comm::world(), trained, mixed, dropped, uniform, info);
  return path;
}

TEST(Inspect, SummaryOfAKnownDump) {
  TempDir dir;
  const std::string path = write_known_dump(dir);
  const RolloutDump d = read_rollout_dump(path);
  EXPECT_EQ(dump_summary(d), "rollout dump " + path + "\n" + R"(step 3, format_version 2, world_size 1, rollout.n 2, max_response_length 3
groups: 3 generated, 2 kept by dynamic sampling (66.7%), 2 trained (100.0% of kept)
outcomes: mixed 2, all_correct 1, all_wrong 0, uniform_other 0
rounds: [0] 2 groups, 1 kept; [1] 1 group, 1 kept
responses: 6 (4 trained)
accuracy: 0.6667 (all), 0.5000 (trained)
score: mean 0.3333; reward: mean 0.2500, min -1.5000, max 1.0000
response length (tokens): mean 1.67, p50 1, p90 3, max 3
score histogram:
  -1: 2 (33.3%)
  1: 4 (66.7%)
finish reasons: eos 4 (66.7%), length 2 (33.3%)
data sources (responses, accuracy):
  gsm: 2, 1.0000
  math: 4, 0.5000
)");
  EXPECT_EQ(generation_order(d), (std::vector<size_t>{2, 0, 1}));  // file order: A, C (trained), B
}

// One NaN score (a reward function gone wrong) is a line of its own; the
// other scores keep their counts, and the mean is of the finite ones.
TEST(Inspect, NonFiniteScoresAreCountedApart) {
  TempDir dir;
  RolloutDump d = read_rollout_dump(write_known_dump(dir));
  const int ones_changed = (d.groups[0].group.score[0] == 1) + (d.groups[1].group.score[0] == 1);
  d.groups[0].group.score[0] = std::nan("");
  d.groups[1].group.score[0] = -INFINITY;
  const std::string s = dump_summary(d);
  EXPECT_NE(s.find("  nan (not a finite score): 1 (16.7%)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  -inf (not a finite score): 1 (16.7%)\n"), std::string::npos) << s;
  EXPECT_EQ(s.find("nan: 6"), std::string::npos) << s;
  EXPECT_EQ(s.find("100.0%)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("(of the finite ones; 2 not finite)"), std::string::npos) << s;
  // Of -1 x2 and 1 x4, two are gone: the others' counts add up to 4.
  const size_t minus = s.find("  -1: "), plus = s.find("  1: ");
  ASSERT_NE(plus, std::string::npos) << s;
  const long long n_minus = minus == std::string::npos ? 0 : std::atoll(s.c_str() + minus + 6);
  const long long n_plus = std::atoll(s.c_str() + plus + 5);
  EXPECT_EQ(n_minus + n_plus, 4) << s;
  EXPECT_EQ(n_plus, 4 - ones_changed) << s;
}

TEST(Inspect, SamplesRoundRobinOverGroups) {
  TempDir dir;
  const RolloutDump d = read_rollout_dump(write_known_dump(dir));
  EXPECT_EQ(dump_samples(d, 4), R"(=== sample 1 of 4: prompt uid 9, round 0, position 0, source gsm, not trained, all_correct; sample_index 0 of 2 responses
--- prompt
2+2=?
--- response
4
--- answer: 4 | ground truth: 4
score 1, acc 1, reward 1, advantage -, finish eos, 1 token
=== sample 2 of 4: prompt uid 7, round 0, position 1, source math, trained, mixed; sample_index 0 of 2 responses
--- prompt
1+1=?
--- response
2
--- answer: 2 | ground truth: 2
score 1, acc 1, reward 1, advantage 0.7071, finish eos, 1 token, in the loss
=== sample 3 of 4: prompt uid 3, round 1, position 0, source math, trained, mixed; sample_index 0 of 2 responses
--- prompt
3*3=?
--- response
9.
--- answer: 9 | ground truth: 9
score 1, acc 1, reward 1, advantage 1, finish eos, 2 tokens, in the loss
=== sample 4 of 4: prompt uid 9, round 0, position 0, source gsm, not trained, all_correct; sample_index 1 of 2 responses
--- prompt
2+2=?
--- response
4.
--- answer: 4 | ground truth: 4
score 1, acc 1, reward 1, advantage -, finish eos, 2 tokens
)");
  // More than there are: all six, the last one C's second response.
  const std::string all = dump_samples(d, 100);
  EXPECT_NE(all.find("=== sample 6 of 6: prompt uid 3"), std::string::npos) << all;
  EXPECT_NE(all.find("score -1, acc 0, reward -1.5, advantage -1, finish length, 1 token, masked out of the loss (overlong "
                     "filtering)\n"),
            std::string::npos)
      << all;
  EXPECT_EQ(dump_samples(d, 0), "");
}

// Response text holds whatever the model wrote: control characters are
// shown escaped (newlines and tabs kept), never sent to the terminal raw.
TEST(Inspect, SamplesEscapeControlCharacters) {
  TempDir dir;
  rl::GroupData g = group(5, 0, 0, "src\x1b", "line 1\n\tline 2", {1}, "4");
  add(g, {2, 3}, std::string("a\x1b[2Jb\0c\r", 9), "4\x07", 1, 1, 0, 1);
  add(g, {4}, "5", "5", -1, -1, 0, 1);
  g.advantage = {1, -1};
  DumpInfo info;
  info.n = 2;
  info.max_response_length = 3;
  const std::string path = dir.file("d.h5");
  const std::vector<rl::GroupData> trained = {g};
  const std::vector<rl::GroupOutcome> mixed = {rl::GroupOutcome::mixed};
  write_rollout_dump(path, parallel::Comm::world(), trained, mixed, {}, {}, info);
  EXPECT_EQ(dump_samples(read_rollout_dump(path), 1),
            "=== sample 1 of 1: prompt uid 5, round 0, position 0, source src\\x1b, trained, mixed; sample_index 0 "
            "of 2 responses\n--- prompt\nline 1\n\tline 2\n--- response\na\\x1b[2Jb\\x00c\\r\n"
            "--- answer: 4\\x07 | ground truth: 4\nscore 1, acc 1, reward 1, advantage 1, finish eos, 2 tokens, in "
            "the loss\n");
}

TEST(Inspect, JsonlHasOneObjectPerResponseInGenerationOrder) {
  TempDir dir;
  const RolloutDump d = read_rollout_dump(write_known_dump(dir));
  std::ostringstream out;
  write_dump_jsonl(d, out);
  std::vector<std::string> lines;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[3],
            R"({"step":3,"uid":7,"round":0,"position":1,"trained":true,"outcome":"mixed","data_source":"math",)"
            R"("prompt":"1+1=?","prompt_ids":[1,2,3],"ground_truth":"2","sample_index":1,"response":"3 and more",)"
            R"("response_ids":[6,7,8],"pred":"3","finish_reason":"length","length":3,"score":-1.0,"acc":0.0,)"
            R"("reward":-1.0,"in_loss":true,"advantage":-0.7071,"old_logprobs":[-0.25,-1.5,-2.0],)"
            R"("sampling_logprobs":[-0.375,-1.5,-1.75]})");
  EXPECT_EQ(lines[0],
            R"({"step":3,"uid":9,"round":0,"position":0,"trained":false,"outcome":"all_correct","data_source":"gsm",)"
            R"("prompt":"2+2=?","prompt_ids":[4,5],"ground_truth":"4","sample_index":0,"response":"4",)"
            R"("response_ids":[9],"pred":"4","finish_reason":"eos","length":1,"score":1.0,"acc":1.0,)"
            R"("reward":1.0,"in_loss":true,"advantage":null,"old_logprobs":null,"sampling_logprobs":null})");
  const auto last = nlohmann::json::parse(lines[5]);
  EXPECT_EQ(last["uid"], 3);
  EXPECT_EQ(last["sample_index"], 1);
  EXPECT_EQ(last["in_loss"], false);
  EXPECT_EQ(last["old_logprobs"], nlohmann::json::parse("[-0.3]"));
}

TEST(Inspect, JsonlKeepsLargeUidsAndReplacesCutCharacters) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  const rl::GroupData g = test::make_dump_group(2, true);  // uid above INT64_MAX; response 1 ends inside a character
  const std::vector<DumpGroup> groups = {{&g, rl::GroupOutcome::mixed, true}};
  write_rollout_dump(path, parallel::Comm::world(), groups, DumpInfo{});
  std::ostringstream out;
  write_dump_jsonl(read_rollout_dump(path), out);
  std::istringstream in(out.str());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(nlohmann::json::parse(line)["uid"].get<uint64_t>(), uint64_t(g.uid));
  EXPECT_NE(line.find(R"("prompt":"Prompt 2: combien font 3×2 ? λ→∞ 🙂")"), std::string::npos) << line;
  std::getline(in, line);
  EXPECT_NE(line.find("\"response\":\"réponse \xef\xbf\xbd"), std::string::npos) << line;  // U+FFFD
}

// ---- the command line ------------------------------------------------------------

test::CliResult dapo(const std::string& args) { return test::run_shell(std::string(DAPO_BINARY_DIR) + "/dapo " + args); }

TEST(InspectCli, PrintsTheLibrarysText) {
  TempDir dir;
  const std::string path = write_known_dump(dir);
  const RolloutDump d = read_rollout_dump(path);
  const test::CliResult summary = dapo("inspect " + path);
  EXPECT_EQ(summary.code, 0);
  EXPECT_EQ(summary.output, dump_summary(d));
  const test::CliResult show = dapo("inspect " + path + " --show 2");
  EXPECT_EQ(show.code, 0);
  EXPECT_EQ(show.output, dump_summary(d) + "\n" + dump_samples(d, 2));
  const test::CliResult jsonl = dapo("inspect --jsonl " + path);
  EXPECT_EQ(jsonl.code, 0);
  std::ostringstream want;
  write_dump_jsonl(d, want);
  EXPECT_EQ(jsonl.output, want.str());
}

TEST(InspectCli, BadInputExitsWithCode2AndNamesTheFile) {
  TempDir dir;
  const std::string missing = dir.file("missing.h5");
  test::CliResult r = dapo("inspect " + missing + " 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "dapo inspect: error: " + missing + ": no such file\n");
  const std::string text = dir.file("notes.h5");
  test::write_text(text, "hello\n");
  r = dapo("inspect " + text + " 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "dapo inspect: error: " + text + ": not an HDF5 file\n");
  const std::string path = write_known_dump(dir);
  EXPECT_EQ(dapo("inspect " + path + " --show -1 2>&1").code, 2);
  EXPECT_EQ(dapo("inspect " + path + " --show 2 --jsonl 2>&1").code, 2);
  r = dapo("inspect 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("needs a rollout dump"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dapo::dump
