// metrics.jsonl: key order as given, integer and double forms, non-finite
// values, escaping, one flushed line per step, truncate/append, inactive
// ranks, and the errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "dapo/core/error.h"
#include "dapo/trainer/metrics_writer.h"
#include "io/io_test_util.h"

namespace dapo::trainer {
namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(MetricsWriter, LineKeepsOrderAndTypes) {
  Metrics m;
  m.add("train/loss", 0.25).add("actor/grad_norm", 3.0).add("perf/total_num_tokens", int64_t(1234)).add("n", 7);
  m.add("timing_s/step", 1.0 / 3.0);
  const std::string line = metrics_json_line(12, m);
  EXPECT_EQ(line.rfind("{\"step\": 12, \"train/loss\": 0.25, \"actor/grad_norm\": 3.0, \"perf/total_num_tokens\": 1234, "
                       "\"n\": 7, \"timing_s/step\": 0.3333333333333333}", 0), 0u) << line;
  const auto j = nlohmann::ordered_json::parse(line);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "train/loss", "actor/grad_norm", "perf/total_num_tokens", "n",
                                            "timing_s/step"}));
  EXPECT_TRUE(j["perf/total_num_tokens"].is_number_integer());
  EXPECT_TRUE(j["actor/grad_norm"].is_number_float());
  EXPECT_EQ(j["timing_s/step"].get<double>(), 1.0 / 3.0);  // round trip exact
  EXPECT_DOUBLE_EQ(m.get("n"), 7.0);
  EXPECT_DOUBLE_EQ(m.get("train/loss"), 0.25);
}

TEST(MetricsWriter, NonFiniteAndEscapes) {
  Metrics m;
  m.add("nan", std::nan("")).add("inf", std::numeric_limits<double>::infinity()).add("q\"\\\n\x01", 1e-300);
  const std::string line = metrics_json_line(0, m);
  const auto j = nlohmann::json::parse(line);
  EXPECT_TRUE(j["nan"].is_null());
  EXPECT_TRUE(j["inf"].is_null());
  EXPECT_EQ(j["q\"\\\n\x01"].get<double>(), 1e-300);
}

TEST(MetricsWriterDeathTest, DuplicateKeysAreBugs) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Metrics m;
  m.add("a", 1).add("a", 2);
  EXPECT_DEATH(metrics_json_line(1, m), "given twice");
  Metrics s;
  s.add("step", 1);
  EXPECT_DEATH(metrics_json_line(1, s), "given twice");
}

TEST(MetricsWriter, WritesFlushedLinesTruncatesOrAppends) {
  test::TempDir dir;
  const std::string path = dir.file("logs/sub/metrics.jsonl");  // directories created
  {
    MetricsWriter w(path, true);
    Metrics m;
    m.add("x", 1.5);
    w.write(1, m);
    // Flushed: readable before the writer closes.
    EXPECT_EQ(lines_of(path), (std::vector<std::string>{"{\"step\": 1, \"x\": 1.5}"}));
    w.write(2, m);
  }
  EXPECT_EQ(lines_of(path).size(), 2u);
  {
    MetricsWriter w(path, true, MetricsWriter::Mode::append);
    w.write(3, Metrics{});
  }
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{"{\"step\": 1, \"x\": 1.5}", "{\"step\": 2, \"x\": 1.5}",
                                                      "{\"step\": 3}"}));
  { MetricsWriter w(path, true); }
  EXPECT_TRUE(lines_of(path).empty());
}

TEST(MetricsWriter, InactiveRankWritesNothing) {
  test::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  MetricsWriter w(path, false);
  w.write(1, Metrics{}.add("x", 1.0));
  EXPECT_FALSE(w.active());
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(MetricsWriter, UnwritablePathIsAUserError) {
  test::TempDir dir;
  test::write_text(dir.file("file"), "x");
  const std::string path = dir.file("file/metrics.jsonl");  // a directory that is a file
  try {
    MetricsWriter w(path, true);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": cannot open the metrics file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dapo::trainer
