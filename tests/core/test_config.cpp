// Configuration: defaults, INI parsing, overrides, and the errors users see.
#include "dapo/core/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "dapo/core/error.h"

namespace dapo {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dapo_config_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& text) {
    const auto path = (dir_ / "run.ini").string();
    std::ofstream(path) << text;
    return path;
  }
  // The UserError message of load_config, or "" if it succeeded.
  static std::string error_of(const std::string& ini, const std::vector<std::string>& overrides = {}) {
    try {
      load_config(ini, overrides);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(ConfigTest, DefaultsAreTheDapoRecipe) {
  const Config c = load_config("", {});
  EXPECT_EQ(c.rollout.n, 16);
  EXPECT_DOUBLE_EQ(c.algorithm.clip_ratio_low, 0.2);
  EXPECT_DOUBLE_EQ(c.algorithm.clip_ratio_high, 0.28);
  EXPECT_EQ(c.algorithm.loss_agg_mode, LossAggMode::token_mean);
  EXPECT_TRUE(c.algorithm.dynamic_sampling);
  EXPECT_EQ(c.algorithm.filter_metric, FilterMetric::acc);
  EXPECT_EQ(c.algorithm.overlong_buffer_len, 4096);
  EXPECT_DOUBLE_EQ(c.algorithm.kl_coef, 0.0);
  EXPECT_EQ(c.rollout.max_response_length, 20480);
  EXPECT_EQ(c.train.train_batch_size, 512);
  EXPECT_EQ(c.train.ppo_mini_batch_size, 32);
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-6);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.1);
  EXPECT_EQ(c.data.max_prompt_length, 2048);
  EXPECT_EQ(c.parallel.backend, BackendChoice::auto_);
}

TEST_F(ConfigTest, ReadsSectionsCommentsAndTypes) {
  const auto path = write(
      "# a comment\n"
      "[rollout]\n"
      "n = 8            # inline comment\n"
      "temperature=0.7\n"
      "; another comment\n"
      "[algorithm]\n"
      "loss_agg_mode = seq-mean-token-mean\n"
      "dynamic_sampling = false\n"
      "\n"
      "[model]\n"
      "path = /data/models/Qwen2.5-0.5B#v2\n");
  const Config c = load_config(path, {});
  EXPECT_EQ(c.rollout.n, 8);
  EXPECT_DOUBLE_EQ(c.rollout.temperature, 0.7);
  EXPECT_EQ(c.algorithm.loss_agg_mode, LossAggMode::seq_mean_token_mean);
  EXPECT_FALSE(c.algorithm.dynamic_sampling);
  EXPECT_EQ(c.model.path, "/data/models/Qwen2.5-0.5B#v2");
  EXPECT_EQ(c.origin_of("rollout.n"), path + ":3");
  EXPECT_EQ(c.origin_of("rollout.top_p"), "default");
}

TEST_F(ConfigTest, OverridesWinOverTheFile) {
  const auto path = write("[rollout]\nn = 8\ntemperature = 0.7\n");
  const Config c = load_config(path, {"--rollout.n=4", "optim.lr=2e-6"});
  EXPECT_EQ(c.rollout.n, 4);
  EXPECT_DOUBLE_EQ(c.rollout.temperature, 0.7);
  EXPECT_DOUBLE_EQ(c.optim.lr, 2e-6);
  EXPECT_EQ(c.origin_of("rollout.n"), "command line");
  // Given twice on the command line, the last value wins.
  EXPECT_EQ(load_config(path, {"--rollout.n=4", "--rollout.n=6"}).rollout.n, 6);
}

// An empty value clears a key: text becomes empty (no validation files),
// other keys their default, whatever the file said.
TEST_F(ConfigTest, EmptyValueClearsTheKey) {
  const auto path = write("[data]\nval_files = aime.jsonl\n[rollout]\nn = 8\n[algorithm]\ndynamic_sampling = false\n");
  const Config c = load_config(path, {"--data.val_files=", "--rollout.n=", "--algorithm.dynamic_sampling="});
  EXPECT_EQ(c.data.val_files, "");
  EXPECT_EQ(c.rollout.n, 16);
  EXPECT_TRUE(c.algorithm.dynamic_sampling);
  EXPECT_EQ(c.origin_of("data.val_files"), "command line");
  // The last of several wins, also when it is empty or when it follows one.
  EXPECT_EQ(load_config(path, {"--data.val_files=", "--data.val_files=x.jsonl"}).data.val_files, "x.jsonl");
  EXPECT_EQ(load_config(path, {"--data.val_files=x.jsonl", "--data.val_files="}).data.val_files, "");
}

// inf and nan pass comparisons written as ranges: refused by name at once.
TEST_F(ConfigTest, NonFiniteValuesAreRefusedByKey) {
  EXPECT_EQ(error_of("", {"--optim.lr=inf"}), "command line: optim.lr: must be a finite number, not inf");
  EXPECT_EQ(error_of("", {"--optim.weight_decay=nan"}), "command line: optim.weight_decay: must be a finite number, not nan");
  EXPECT_EQ(error_of("", {"--algorithm.kl_coef=nan"}), "command line: algorithm.kl_coef: must be a finite number, not nan");
  EXPECT_EQ(error_of("", {"--rollout.temperature=inf"}),
            "command line: rollout.temperature: must be a finite number, not inf");
  EXPECT_EQ(error_of("", {"--algorithm.entropy_coeff=-inf"}),
            "command line: algorithm.entropy_coeff: must be a finite number, not -inf");
}

// Finite but absurd loss coefficients would overflow the loss and stop the
// run as "diverged" blaming optim.lr: refused by key. So is a weight decay
// that would zero the weights in one step.
TEST_F(ConfigTest, AbsurdCoefficientsAreRefusedByKey) {
  EXPECT_EQ(error_of("", {"--algorithm.entropy_coeff=1e300"}),
            "command line: algorithm.entropy_coeff: 1e+300 is beyond +-1000, the most dapo takes (real runs use 0 "
            "to a few: a larger coefficient overflows the loss); lower it");
  EXPECT_NE(error_of("", {"--algorithm.entropy_coeff=-2000"}).find("algorithm.entropy_coeff: -2000 is beyond"),
            std::string::npos);
  EXPECT_NE(error_of("", {"--algorithm.kl_coef=1e9"}).find("algorithm.kl_coef: 1e+09 is beyond"), std::string::npos);
  EXPECT_NE(error_of("", {"--algorithm.overlong_penalty_factor=5e3"}).find("overlong_penalty_factor: 5000 is beyond"),
            std::string::npos);
  EXPECT_EQ(load_config("", {"--algorithm.entropy_coeff=-0.01", "--algorithm.kl_coef=1000"}).algorithm.kl_coef, 1000);
  EXPECT_EQ(error_of("", {"--optim.lr=0.5", "--optim.weight_decay=2"}),
            "command line: optim.weight_decay: 2 times optim.lr = 0.5 (command line) is 1, at least 1: each step "
            "multiplies the weights by 1 - lr x weight_decay, which would zero or flip them; lower one of them");
  EXPECT_EQ(load_config("", {"--optim.lr=0.5", "--optim.weight_decay=1.9"}).optim.weight_decay, 1.9);
}

// The keys the paper's recipe adds: their defaults and their names.
TEST_F(ConfigTest, RecipeKeysParse) {
  const Config d = load_config("", {});
  EXPECT_EQ(d.rollout.on_short_batch, ShortBatch::train);
  EXPECT_EQ(d.reward.verifier, RewardVerifier::symbolic);
  EXPECT_EQ(d.model.chat_template, ChatTemplate::auto_);
  EXPECT_EQ(d.train.total_epochs, 1);
  const Config c = load_config("", {"--rollout.on_short_batch=skip", "--reward.verifier=math_dapo",
                                    "--model.chat_template=hf", "--train.total_epochs=100"});
  EXPECT_EQ(c.rollout.on_short_batch, ShortBatch::skip);
  EXPECT_EQ(c.reward.verifier, RewardVerifier::math_dapo);
  EXPECT_EQ(c.model.chat_template, ChatTemplate::hf);
  EXPECT_EQ(c.train.total_epochs, 100);
  EXPECT_EQ(error_of("", {"--rollout.on_short_batch=never"}),
            "command line: bad value 'never' for rollout.on_short_batch: 'never' is not one of train|skip|fail");
  EXPECT_EQ(error_of("", {"--train.total_epochs=0"}), "command line: train.total_epochs: must be at least 1");
}

// Every key dapo reads is written out in the paper's recipe, so that a new
// default cannot change it; the per-size files add the model and folders.
TEST_F(ConfigTest, RecipeWritesEveryKey) {
  const std::string base = std::string(DAPO_SOURCE_DIR) + "/inputs/dapo_base.ini";
  std::ifstream in(base);
  ASSERT_TRUE(in) << base;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string all = config_to_ini(load_config("", {}));
  std::string section;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line[0] == '[') {
      section = line;
      continue;
    }
    const std::string key = line.substr(0, line.find(" = "));
    // The per-size files' keys: the model, the grid, the folders.
    static const std::set<std::string> per_size{"[model] path", "[model] tokenizer", "[parallel] backend",
                                                "[parallel] tp", "[checkpoint] dir", "[dump] dir", "[log] dir"};
    if (per_size.count(section + " " + key)) continue;
    const size_t at = text.find("\n" + section + "\n");
    ASSERT_NE(at, std::string::npos) << section;
    const size_t end = text.find("\n[", at + 1);
    const std::string body = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    EXPECT_NE(body.find("\n" + key + " = "), std::string::npos) << base << ": " << section << " " << key;
  }
  const Config recipe = load_config(base, {});
  EXPECT_DOUBLE_EQ(recipe.algorithm.clip_ratio_c, 3.0);
  EXPECT_EQ(recipe.reward.verifier, RewardVerifier::math_dapo);
  EXPECT_EQ(recipe.model.chat_template, ChatTemplate::hf);
  EXPECT_EQ(recipe.train.total_epochs, 100);
}

// A base recipe and a job's overrides: the later file wins, the command line
// wins over both, and each key's origin names the file that set it.
TEST_F(ConfigTest, SeveralFilesLaterOneWins) {
  const auto base = (dir_ / "base.ini").string(), job = (dir_ / "job.ini").string();
  std::ofstream(base) << "[rollout]\nn = 8\ntemperature = 0.7\n[optim]\nlr = 1e-6\n";
  std::ofstream(job) << "[rollout]\nn = 16\n";
  const Config c = load_config(base + ", " + job, {"--optim.lr=3e-6"});
  EXPECT_EQ(c.rollout.n, 16);
  EXPECT_DOUBLE_EQ(c.rollout.temperature, 0.7);
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-6);
  EXPECT_EQ(c.origin_of("rollout.n"), job + ":2");
  EXPECT_EQ(c.origin_of("rollout.temperature"), base + ":3");
  EXPECT_EQ(error_of(base + ",," + job), "command line: --config '" + base + ",," + job + "' has an empty file name");
}

TEST_F(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  const auto path = write("[rollout]\nn = 8\ntemprature = 0.7\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path + ":3"), std::string::npos) << e;
  EXPECT_NE(e.find("temprature"), std::string::npos) << e;
  EXPECT_NE(e.find("rollout.temperature"), std::string::npos) << e;  // the hint
  EXPECT_NE(error_of("", {"--rollout.bogus=1"}).find("command line"), std::string::npos);
  EXPECT_NE(error_of(write("[nosuchsection]\nn = 1\n")).find("unknown key"), std::string::npos);
}

TEST_F(ConfigTest, BadValueNamesFileLineAndKey) {
  const auto path = write("[train]\nseed = 3\n[rollout]\nn = eight\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path + ":4"), std::string::npos) << e;
  EXPECT_NE(e.find("rollout.n"), std::string::npos) << e;
  EXPECT_NE(e.find("eight"), std::string::npos) << e;
  const std::string e2 = error_of(write("[algorithm]\nloss_agg_mode = token-sum\n"));
  EXPECT_NE(e2.find(":2"), std::string::npos) << e2;
  EXPECT_NE(e2.find("token-mean"), std::string::npos) << e2;  // lists the choices
  EXPECT_NE(error_of("", {"--algorithm.dynamic_sampling=maybe"}).find("algorithm.dynamic_sampling"),
            std::string::npos);
}

TEST_F(ConfigTest, OutOfRangeValuesNameTheirOrigin) {
  const auto path = write("[rollout]\n\ntop_p = 1.5\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path + ":3"), std::string::npos) << e;
  EXPECT_NE(e.find("rollout.top_p"), std::string::npos) << e;
  EXPECT_NE(error_of("", {"--parallel.tp=0"}).find("parallel.tp"), std::string::npos);
  // Training-only constraints are checked by check_training_config, not by every command.
  EXPECT_EQ(error_of("", {"--rollout.n=1"}), "");
  auto training_error = [](const std::vector<std::string>& overrides) -> std::string {
    try {
      check_training_config(load_config("", overrides));
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(training_error({"--rollout.n=1"}).find("command line: rollout.n: dynamic sampling"), std::string::npos);
  EXPECT_EQ(training_error({"--rollout.n=1", "--algorithm.dynamic_sampling=false"}), "");
  EXPECT_NE(training_error({"--rollout.max_response_length=100"}).find("algorithm.overlong_buffer_len"),
            std::string::npos);
  EXPECT_EQ(training_error({}), "");
  EXPECT_NE(training_error({"--train.ppo_mini_batch_size=30"}).find("must divide"), std::string::npos);
  EXPECT_NE(error_of("", {"--train.ppo_mini_batch_size=0"}).find("train.ppo_mini_batch_size"), std::string::npos);
  EXPECT_NE(error_of("", {"--algorithm.overlong_buffer_len=-1"}).find("algorithm.overlong_buffer_len"),
            std::string::npos);
}

// A huge count is refused by name at load, not by an allocation that fails
// later without naming it; the shipped recipes' values stay well inside.
TEST_F(ConfigTest, HugeCountsAreRefusedByKey) {
  for (const auto& [arg, want] : std::vector<std::pair<std::string, std::string>>{
           {"--rollout.n=4294967297", "command line: rollout.n: 4294967297 is more than 65536, the most dapo takes"},
           {"--rollout.val_n=100000000", "command line: rollout.val_n: 100000000 is more than 65536"},
           {"--rollout.block_size=1000000000", "command line: rollout.block_size: 1000000000 is more than 65536"},
           {"--rollout.gen_batch_size=1000000000", "rollout.gen_batch_size: 1000000000 is more than 1048576"},
           {"--rollout.max_num_seqs=1000000000", "rollout.max_num_seqs: 1000000000 is more than 65536"},
           {"--rollout.max_num_batched_tokens=1000000000000", "rollout.max_num_batched_tokens: 1000000000000 is more"},
           {"--rollout.max_response_length=1048577", "rollout.max_response_length: 1048577 is more than 1048576"},
           {"--data.max_prompt_length=9223372036854775807", "data.max_prompt_length: 9223372036854775807 is more"},
           {"--algorithm.overlong_buffer_len=2000000", "algorithm.overlong_buffer_len: 2000000 is more"},
           {"--train.train_batch_size=2000000", "train.train_batch_size: 2000000 is more than 1048576"},
           {"--train.ppo_mini_batch_size=2000000", "train.ppo_mini_batch_size: 2000000 is more than 1048576"},
           {"--train.max_token_len_per_gpu=3000000", "train.max_token_len_per_gpu: 3000000 is more than 2097152"},
           {"--parallel.tp=4294967297", "parallel.tp: 4294967297 is more than 65536"}}) {
    const std::string e = error_of("", {arg});
    EXPECT_NE(e.find(want), std::string::npos) << arg << ": " << e;
    EXPECT_NE(e.find("; lower it"), std::string::npos) << e;
  }
  const auto path = write("[rollout]\nn = 70000\n");
  EXPECT_NE(error_of(path).find(path + ":2: rollout.n: 70000 is more than 65536"), std::string::npos) << error_of(path);
  // The bounds themselves are taken.
  EXPECT_EQ(error_of("", {"--rollout.n=65536", "--rollout.val_n=65536", "--rollout.block_size=65536",
                          "--rollout.max_num_seqs=65536", "--rollout.max_response_length=1048576",
                          "--rollout.max_num_batched_tokens=1048576", "--data.max_prompt_length=1048576",
                          "--train.max_token_len_per_gpu=2097152", "--rollout.gen_batch_size=1048576"}),
            "");
  // Training holds n x gen_batch_size responses per round at once.
  try {
    check_training_config(load_config("", {"--rollout.n=65536"}));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("default: rollout.gen_batch_size: 1536 prompts x rollout.n = 65536 (command "
                                         "line) is 100663296 responses per generation round, more than 16777216"),
              std::string::npos)
        << e.what();
  }
  for (const char* recipe : {"dapo_base.ini", "dapo_1.5b.ini", "dapo_7b.ini", "dapo_32b.ini", "dapo_qwen3_8b.ini",
                             "dapo_qwen3_32b.ini", "demo.ini",
                             "demo_sft.ini", "demo_gpu.ini", "demo_gpu_sft.ini", "cpu_smoke.ini"})
    EXPECT_EQ(error_of(std::string(DAPO_SOURCE_DIR) + "/inputs/" + recipe), "") << recipe;
}

// A key given twice on the command line: the last value wins (job scripts
// rely on it), with one warning line naming the key and that value.
TEST_F(ConfigTest, RepeatedOverrideWarnsAndTheLastWins) {
  ::testing::internal::CaptureStderr();
  const Config c = load_config("", {"--checkpoint.dir=job", "--rollout.n=4", "--checkpoint.dir=mine"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.checkpoint.dir, "mine");
  EXPECT_EQ(c.rollout.n, 4);
  EXPECT_NE(err.find("command line: checkpoint.dir is given 2 times; the last one wins: checkpoint.dir = 'mine'"),
            std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  ::testing::internal::CaptureStderr();
  load_config("", {"--checkpoint.dir=job", "--rollout.n=4"});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// A 10 MB value or key is quoted by its first 200 bytes and its size, not whole.
TEST_F(ConfigTest, ErrorsQuoteAtMost200BytesOfAValue) {
  const std::string huge(size_t(10) << 20, '7');
  for (const auto& [arg, bytes] : std::vector<std::pair<std::string, size_t>>{
           {"--rollout.n=x" + huge, huge.size() + 1},
           {"--model.chat_template=" + huge, huge.size()},
           {"--rollout." + huge + "=1", huge.size()},
           {"--log.level=" + huge, huge.size()},
           {"--" + huge, huge.size() + 2}}) {
    const std::string e = error_of("", {arg});
    EXPECT_LT(e.size(), 1000u) << e.substr(0, 1000);
    EXPECT_NE(e.find("... (" + std::to_string(bytes) + " bytes)"), std::string::npos) << e;
  }
  EXPECT_NE(error_of("", {"--rollout.n=x" + huge}).find("command line: bad value 'x777"), std::string::npos);
  // A short value is quoted whole, as before.
  EXPECT_NE(error_of("", {"--log.level=loud"}).find("log.level: unknown log level 'loud' (debug|info|warn|error)"),
            std::string::npos);
  const std::string big_ini(size_t(60) << 10, 'a');
  const auto path = write("[rollout]\nn = " + big_ini + "\n");
  const std::string e = error_of(path);
  EXPECT_LT(e.size(), 1000u);
  EXPECT_NE(e.find(path + ":2: bad value 'aaa"), std::string::npos) << e;
  EXPECT_NE(e.find("... (61440 bytes)"), std::string::npos) << e;
}

TEST_F(ConfigTest, MissingFileAndMalformedLines) {
  const std::string missing = (dir_ / "nope.ini").string();
  const std::string e = error_of(missing);
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(error_of(write("[rollout]\nn 8\n")).find(":2: expected 'key = value'"), std::string::npos);
  EXPECT_NE(error_of(write("n = 8\n")).find(":1: key 'n' outside of any [section]"), std::string::npos);
  EXPECT_NE(error_of(write("[rollout]\nn = 8\nn = 9\n")).find(":3: key 'n' set twice"), std::string::npos);
  EXPECT_NE(error_of(write("[rollout\n")).find(":1: malformed section"), std::string::npos);
  EXPECT_NE(error_of("", {"--rollout.n"}).find("--section.key=value"), std::string::npos);
  // A folder is no configuration (an ifstream opens it and reads nothing).
  EXPECT_EQ(error_of(dir_.string()), dir_.string() + ": is a directory, not a configuration file");
}

// User bytes quoted in an error are escaped: an ESC or NUL in a config line
// must not reach the terminal raw.
TEST_F(ConfigTest, ErrorsEscapeControlCharacters) {
  const std::string path = write("[rollout]\nn = 8\x1b[2J\x01\n");
  const std::string e = error_of(path);
  EXPECT_EQ(e.rfind(path + ":2: bad value '8\\x1b[2J\\x01' for rollout.n: ", 0), 0u) << e;
  EXPECT_EQ(e.find_first_of(std::string("\x1b\x01", 2)), std::string::npos) << e;  // boost's part too
  EXPECT_EQ(error_of(write(std::string("[rollout]\nbo\0gus = 1\n", 21))),
            dir_.string() + "/run.ini:2: unknown key 'bo\\x00gus' in [rollout]");
  EXPECT_EQ(error_of("", {"--rollout.n\x9b"}),
            "command line: '--rollout.n\\x9b' is not of the form --section.key=value");
}

TEST(Printable, EscapesControlsAndInvalidUtf8KeepsText) {
  EXPECT_EQ(printable("plain ascii, \xc3\xa9t\xc3\xa9 \xe2\x88\x9a" "2 \xf0\x9f\x98\x80"),
            "plain ascii, \xc3\xa9t\xc3\xa9 \xe2\x88\x9a" "2 \xf0\x9f\x98\x80");
  EXPECT_EQ(printable(std::string("a\0b\x1b[31m\x7f\r\n\tc", 13)), "a\\x00b\\x1b[31m\\x7f\\r\\n\\tc");
  EXPECT_EQ(printable("line 1\n\tline 2\x1b", true), "line 1\n\tline 2\\x1b");
  EXPECT_EQ(printable("\xc2\x9b" "1m"), "\\u009b1m");       // C1 CSI, UTF-8 encoded
  EXPECT_EQ(printable("\xff\xc3(\xed\xa0\x80"), "\\xff\\xc3(\\xed\\xa0\\x80");  // invalid, lone lead, surrogate
}

TEST_F(ConfigTest, SavedIniReadsBackToTheSameConfig) {
  const Config a = load_config("", {"--rollout.n=5", "--optim.lr=3.3e-7", "--model.path=/x/y z",
                                    "--algorithm.loss_agg_mode=seq-mean-token-sum", "--parallel.backend=cpu",
                                    "--checkpoint.resume=never"});
  const std::string ini = config_to_ini(a);
  const Config b = load_config(write(ini), {});
  EXPECT_EQ(config_to_ini(b), ini);
  EXPECT_EQ(b.rollout.n, 5);
  EXPECT_DOUBLE_EQ(b.optim.lr, 3.3e-7);
  EXPECT_EQ(b.model.path, "/x/y z");
  EXPECT_EQ(b.algorithm.loss_agg_mode, LossAggMode::seq_mean_token_sum);
  EXPECT_NE(ini.find("[algorithm]\n"), std::string::npos);
  EXPECT_NE(config_help().find("--rollout.n=16"), std::string::npos);
}

}  // namespace
}  // namespace dapo
