// The JSONL that jobs/convert_verl_data.py makes of verl's parquet files
// (tests/fixtures/data/verl_parquet/expected*.jsonl, written with pyarrow;
// ctest convert_verl_data checks that both of its readers give these bytes)
// loads as dapo's prompt data: unique uids, messages, ground truths and
// indices as text.
#include <gtest/gtest.h>

#include <string>

#include "dapo/data/dataset.h"

namespace dapo::data {
namespace {

std::string fixture(const std::string& name) {
  return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/data/verl_parquet/" + name;
}

TEST(VerlParquetJsonl, DapoMathLoadsOnePromptPerPair) {
  const PromptDataset d = PromptDataset::load({fixture("expected.jsonl")});
  ASSERT_EQ(d.size(), 6);
  EXPECT_EQ(d[0].data_source, "math_dapo");
  EXPECT_EQ(d[0].index, "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f70000");
  ASSERT_EQ(d[0].messages.size(), 1u);
  EXPECT_EQ(d[0].messages[0].role, "user");
  EXPECT_NE(d[0].messages[0].content.find("Écrivez − simplement"), std::string::npos);
  EXPECT_EQ(d[0].ground_truth, "7");
  EXPECT_NE(d[1].messages[0].content.find("\\frac{x^2}{2}$ and \"g\"\tas given. 求 $f(4)$ 🙂, a/b\u2028next"),
            std::string::npos);
  ASSERT_EQ(d[2].messages.size(), 2u);
  EXPECT_EQ(d[2].messages[0].role, "system");
  EXPECT_EQ(d[2].messages[0].content, "Think step by step.\x01");
  EXPECT_EQ(d[3].messages[0].content, d[0].messages[0].content);  // the same prompt, another answer
  EXPECT_EQ(d[3].ground_truth, "-7");
  EXPECT_EQ(d[4].messages[0].role, "assistant");
}

TEST(VerlParquetJsonl, KeptDuplicatesHaveTheirOwnIndices) {
  const PromptDataset d = PromptDataset::load({fixture("expected_keep_duplicates.jsonl")});
  EXPECT_EQ(d.size(), 20);
}

TEST(VerlParquetJsonl, AimeNumbersBecomeText) {
  const PromptDataset d = PromptDataset::load({fixture("aime_expected.jsonl")});
  ASSERT_EQ(d.size(), 4);
  const char* truths[] = {"34", "2.5", "1e-05", "55"};
  const char* indices[] = {"0", "1", "2", "1152921504606846979"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(d[i].data_source, "aime24");
    EXPECT_EQ(d[i].ground_truth, truths[i]);
    EXPECT_EQ(d[i].index, indices[i]);
    ASSERT_EQ(d[i].messages.size(), 2u);
    EXPECT_EQ(d[i].messages[0].role, "system");
  }
  EXPECT_EQ(PromptDataset::load({fixture("aime_expected_keep_duplicates.jsonl")}).size(), 12);
}

}  // namespace
}  // namespace dapo::data
