// Prompt files and datasets: the fixtures in tests/fixtures/data, file-level
// errors (file:line), comma-separated lists, uid uniqueness across files,
// and the load time of a DAPO-Math-sized file.
#include "dapo/data/dataset.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "dapo/core/clock.h"
#include "dapo/core/error.h"

namespace dapo::data {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/data/" + name; }

class DatasetFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dapo_dataset_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  template <class F>
  static std::string error_of(F&& f) {
    try {
      f();
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(DatasetFiles, VerlFixture) {
  const std::string path = fixture("verl_math.jsonl");
  const std::vector<PromptRecord> r = load_prompt_file(path);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].line, 1);
  EXPECT_EQ(r[1].line, 2);
  EXPECT_EQ(r[2].line, 4);  // line 3 is empty
  EXPECT_EQ(r[3].line, 5);
  for (const PromptRecord& rec : r) EXPECT_EQ(rec.file, path);

  EXPECT_EQ(r[0].data_source, "math_dapo");
  EXPECT_EQ(r[0].index, "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079");
  EXPECT_EQ(r[0].ground_truth, "7");
  EXPECT_NE(r[0].messages.at(0).content.find("\n\nWhat is $3 + 4$?\n\nRemember"), std::string::npos);
  EXPECT_NE(r[0].messages.at(0).content.find("after \"Answer:\"."), std::string::npos);

  EXPECT_EQ(r[1].data_source, "aime24");
  ASSERT_EQ(r[1].messages.size(), 2u);
  EXPECT_EQ(r[1].messages[0].role, "system");
  EXPECT_EQ(r[1].ground_truth, "5");
  EXPECT_EQ(r[1].index, "12");

  EXPECT_EQ(r[2].ground_truth, "0.5");
  EXPECT_EQ(r[2].index, "30");

  EXPECT_EQ(r[3].index, "3");  // no extra_info: the 4th record of its file
  EXPECT_EQ(r[3].ground_truth, "\\sqrt{2}");
  EXPECT_EQ(r[3].messages.at(0).content, "Caf\xC3\xA9 \xE2\x88\x92 unicode: \xE2\x88\x9A" "2 \xF0\x9F\x98\x80?");
}

TEST_F(DatasetFiles, SimpleFixtureWithCrlfAndBlankLines) {
  const std::vector<PromptRecord> r = load_prompt_file(fixture("simple.jsonl"));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].line, 1);
  EXPECT_EQ(r[1].line, 4);  // lines 2 and 3 are blank ("\r", "   \r")
  EXPECT_EQ(r[2].line, 5);  // the last line has no newline
  EXPECT_EQ(r[0].messages.at(0).content, "What is $1+1$?");
  EXPECT_EQ(r[0].ground_truth, "2");  // no trailing \r
  EXPECT_EQ(r[1].ground_truth, "7");
  EXPECT_EQ(r[2].ground_truth, "\\frac{1}{2}");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[size_t(i)].data_source, "simple");
    EXPECT_EQ(r[size_t(i)].index, std::to_string(i));
  }
}

TEST_F(DatasetFiles, RawPromptFixture) {
  const std::vector<PromptRecord> r = load_prompt_file(fixture("raw_prompt.jsonl"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].is_chat());
  EXPECT_EQ(r[0].text, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(r[0].data_source, "raw");
}

TEST_F(DatasetFiles, PandasExportFixture) {
  const std::vector<PromptRecord> r = load_prompt_file(fixture("pandas_export.jsonl"));
  ASSERT_EQ(r.size(), 3u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].data_source, "math_dapo");
    EXPECT_EQ(r[i].index, "uuid-" + std::to_string(i));
    EXPECT_EQ(r[i].ground_truth, "34");
    ASSERT_EQ(r[i].messages.size(), 1u);
    EXPECT_EQ(r[i].messages[0].role, "user");
    EXPECT_EQ(r[i].messages[0].content,
              "Solve $x^2=4$ \\frac{1}{2} / \xC3\xA9 \xE2\x88\x92 " + std::to_string(i));
  }
}

TEST_F(DatasetFiles, MalformedLineNamesFileAndLine) {
  const std::string path = fixture("malformed_line3.jsonl");
  const std::string msg = error_of([&] { load_prompt_file(path); });
  EXPECT_EQ(msg.rfind(path + ":3: invalid JSON: column ", 0), 0u) << msg;
}

TEST_F(DatasetFiles, LineNumbersCountEveryPhysicalLine) {
  const std::string path = write("x.jsonl", "\n\n{\"problem\":\"a\",\"answer\":\"1\"}\n\t\n{\"problem\":\"b\"}\n");
  EXPECT_EQ(error_of([&] { load_prompt_file(path); }),
            path + ":5: missing ground truth: expected field reward_model.ground_truth (verl) or answer");
}

TEST_F(DatasetFiles, ByteOrderMarkIsSkipped) {
  const std::string path = write("bom.jsonl", "\xEF\xBB\xBF{\"problem\":\"a\",\"answer\":\"1\"}\n");
  const std::vector<PromptRecord> r = load_prompt_file(path);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].line, 1);
}

TEST_F(DatasetFiles, FileErrors) {
  const std::string missing = (dir_ / "missing.jsonl").string();
  EXPECT_EQ(error_of([&] { load_prompt_file(missing); }),
            missing + ": cannot open prompt file: No such file or directory");
  EXPECT_EQ(error_of([&] { load_prompt_file(dir_.string()); }), dir_.string() + ": is a directory, not a prompt file");
  const std::string empty = write("empty.jsonl", "");
  EXPECT_EQ(error_of([&] { load_prompt_file(empty); }), empty + ": no prompts (the file has no non-empty line)");
  const std::string blank = write("blank.jsonl", "\n  \n\r\n");
  EXPECT_EQ(error_of([&] { load_prompt_file(blank); }), blank + ": no prompts (the file has no non-empty line)");
  const std::string parquet = write("train.parquet", std::string("PAR1\x15\x04\x15\x00", 8));
  EXPECT_EQ(error_of([&] { load_prompt_file(parquet); }),
            parquet + ": a parquet file; dapo reads prompts as JSONL: convert it first with python3 "
                      "jobs/convert_verl_data.py IN.parquet OUT.jsonl (README, \"Prompt data\")");
}

TEST_F(DatasetFiles, SplitFileList) {
  EXPECT_EQ(split_file_list("a.jsonl", "data.train_files"), std::vector<std::string>{"a.jsonl"});
  EXPECT_EQ(split_file_list(" a.jsonl ,b.jsonl,  c d.jsonl", "data.train_files"),
            (std::vector<std::string>{"a.jsonl", "b.jsonl", "c d.jsonl"}));
  EXPECT_TRUE(split_file_list("", "data.val_files").empty());
  EXPECT_TRUE(split_file_list("  ", "data.val_files").empty());
  EXPECT_EQ(error_of([] { split_file_list("a.jsonl,,b.jsonl", "data.train_files"); }),
            "data.train_files = \"a.jsonl,,b.jsonl\": empty file name in the comma-separated list");
  EXPECT_EQ(error_of([] { split_file_list("a.jsonl,", "data.train_files"); }),
            "data.train_files = \"a.jsonl,\": empty file name in the comma-separated list");
  EXPECT_EQ(error_of([] { PromptDataset::load_list(" ", "data.train_files"); }),
            "data.train_files is empty: no prompt files to load");
}

TEST_F(DatasetFiles, SeveralFilesInOrderWithUidLookup) {
  const PromptDataset d =
      PromptDataset::load_list(fixture("verl_math.jsonl") + ", " + fixture("simple.jsonl") + "," +
                                   fixture("raw_prompt.jsonl"),
                               "data.train_files");
  ASSERT_EQ(d.size(), 8);
  EXPECT_EQ(d[0].data_source, "math_dapo");
  EXPECT_EQ(d[4].data_source, "simple");
  EXPECT_EQ(d[4].line, 1);
  EXPECT_EQ(d[7].data_source, "raw");
  for (int64_t i = 0; i < d.size(); ++i) EXPECT_EQ(d.find(d[i].uid), i);
  EXPECT_EQ(d.find(prompt_uid("nowhere", "0")), -1);
}

TEST_F(DatasetFiles, DuplicateWithinAFileNamesBothLines) {
  const std::string path = write("d.jsonl",
                                 "{\"problem\":\"a\",\"answer\":\"1\",\"extra_info\":{\"index\":7}}\n"
                                 "{\"problem\":\"b\",\"answer\":\"2\",\"extra_info\":{\"index\":8}}\n"
                                 "{\"problem\":\"c\",\"answer\":\"3\",\"extra_info\":{\"index\":\"7\"}}\n");
  const std::string msg = error_of([&] { PromptDataset::load({path}); });
  EXPECT_EQ(msg.rfind(path + ":3: duplicate prompt: data_source \"d\" and index \"7\" were already given at " +
                          path + ":1 (prompt uids must be unique",
                      0),
            0u)
      << msg;
}

TEST_F(DatasetFiles, DuplicateAcrossFilesNamesBothFiles) {
  // Same stem, no index: both files' first records are ("x", "0").
  const std::string a = write("a/x.jsonl", "{\"problem\":\"a\",\"answer\":\"1\"}\n");
  const std::string b = write("b/x.jsonl", "\n{\"problem\":\"b\",\"answer\":\"2\"}\n");
  const std::string msg = error_of([&] { PromptDataset::load({a, b}); });
  EXPECT_EQ(msg.rfind(b + ":2: duplicate prompt: data_source \"x\" and index \"0\" were already given at " + a + ":1",
                      0),
            0u)
      << msg;
  // A file listed twice.
  const std::string twice = error_of([&] { PromptDataset::load_list(a + "," + a, "data.train_files"); });
  EXPECT_EQ(twice.rfind(a + ":1: duplicate prompt", 0), 0u) << twice;
  // Different stems do not collide.
  const std::string c = write("b/y.jsonl", "{\"problem\":\"b\",\"answer\":\"2\"}\n");
  EXPECT_EQ(PromptDataset::load({a, c}).size(), 2);
}

TEST_F(DatasetFiles, HashCollisionOfDifferentKeysIsReported) {
  // Two different keys cannot be made to collide on purpose, so forge the uids.
  PromptRecord r1, r2;
  r1.data_source = "s";
  r1.index = "1";
  r1.file = "a.jsonl";
  r1.line = 3;
  r2 = r1;
  r2.index = "2";
  r2.file = "b.jsonl";
  r2.line = 9;
  r1.uid = r2.uid = 42;
  EXPECT_EQ(error_of([&] { PromptDataset({r1, r2}); }),
            "b.jsonl:9: prompt uid of (data_source \"s\", index \"2\") collides with that of (\"s\", \"1\") at "
            "a.jsonl:3 (a 64-bit hash collision: change one of the two indices)");
}

// DAPO-Math-17k after dropping its repeats: 17,398 prompts of about 600 bytes.
TEST_F(DatasetFiles, LoadsADapoMathSizedFileQuickly) {
  const int n = 17398;
  std::string text;
  text.reserve(size_t(n) * 720);
  for (int i = 0; i < n; ++i) {
    char uuid[40];
    std::snprintf(uuid, sizeof uuid, "%08x-a1cb-49d1-8c1e-%012x", unsigned(i * 2654435761u), unsigned(i));
    text += R"({"data_source": "math_dapo", "prompt": [{"content": "Solve the following math problem step by step. )"
            R"(The last line of your response should be of the form Answer: $Answer (without quotes) where $Answer )"
            R"(is the answer to the problem.\n\nLet $f(x) = x^2 + )" +
            std::to_string(i) +
            R"(x + 1$. Find the sum of all real $x$ such that $f(f(x)) = x$, written as $\\frac{m}{n}$; )"
            R"(compute $m + n$.\n\nRemember to put your answer on its own line after \"Answer:\".", "role": "user"}], )"
            R"("ability": "MATH", "reward_model": {"ground_truth": ")" +
            std::to_string(i % 1000) + R"(", "style": "rule-lighteval/MATH_v2"}, "extra_info": {"index": ")" + uuid +
            "\"}}\n";
  }
  const std::string path = write("dapo-math-17k.jsonl", text);
  const auto t0 = Clock::now();
  const std::clock_t c0 = std::clock();
  const PromptDataset d = PromptDataset::load({path});
  const double cpu_seconds = double(std::clock() - c0) / CLOCKS_PER_SEC;
  const double seconds = seconds_since(t0);
  ASSERT_EQ(d.size(), n);
  EXPECT_EQ(d[n - 1].ground_truth, std::to_string((n - 1) % 1000));
  std::printf("loaded %d prompts (%.1f MB) in %.3f s (%.3f s of CPU)\n", n, double(text.size()) / 1e6, seconds,
              cpu_seconds);
  // Well under a second in a Release build; the bound leaves room for a busy
  // machine and unoptimised builds.
  EXPECT_LT(seconds, 3.0);
}

}  // namespace
}  // namespace dapo::data
