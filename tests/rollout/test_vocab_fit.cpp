// How a model's vocabulary fits its tokenizer's (rollout::vocab_fit_note):
// Qwen's padded embedding is information, a model far larger than its
// tokenizer a warning; both name both sizes; nothing when the tokenizer
// covers the model.
#include <gtest/gtest.h>

#include "dapo/rollout/model_source.h"
#include "io/io_test_util.h"

namespace dapo::rollout {
namespace {

const data::Tokenizer& tiny_tokenizer() {
  static const data::Tokenizer t =
      data::Tokenizer::load(std::string(DAPO_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny_tokenizer.json");
  return t;
}

std::string note(int64_t model_vocab, bool* warning) {
  model::Qwen2Config c = test::tiny_config(true);
  c.vocab_size = model_vocab;
  return vocab_fit_note(tiny_tokenizer(), c, warning);
}

TEST(VocabFit, PaddingIsInformationAMismatchAWarning) {
  const data::Tokenizer& t = tiny_tokenizer();
  ASSERT_EQ(t.vocab_size(), 281);
  bool warning = true;
  EXPECT_EQ(note(281, &warning), "");
  EXPECT_FALSE(warning);
  EXPECT_EQ(note(96, &warning), "");  // the tokenizer's extra ids are refused where prompts are encoded
  // 320 = 10 * 32 rows for 281 ids, as Qwen's 151,936 for 151,665.
  EXPECT_EQ(note(320, &warning), "model: vocab_size = 320 rows, the tokenizer " + t.source() +
                                     " has 281 ids: the 39 extra rows (ids 281..319) are the embedding's padding, as "
                                     "Qwen ships it; a sampled one would decode to nothing");
  EXPECT_FALSE(warning);
  // Not a padded row count, or too many spare rows: another model's tokenizer?
  for (const int64_t v : {int64_t(300), int64_t(2048)}) {
    warning = false;
    EXPECT_EQ(note(v, &warning), "model: vocab_size = " + std::to_string(v) + " but the tokenizer " + t.source() +
                                     " has only 281 ids: " + std::to_string(v - 281) + " ids (281.." +
                                     std::to_string(v - 1) + ") decode to nothing, more than an embedding's padding; "
                                     "does the tokenizer belong to this model?");
    EXPECT_TRUE(warning) << v;
  }
}

}  // namespace
}  // namespace dapo::rollout
