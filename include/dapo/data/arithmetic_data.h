// The demo's data files, made from arithmetic_task.h's problems: prompt
// files in verl's schema for training and validation, and prompt/response
// pairs for the supervised warm start (`dapo sft`). The bytes depend only on
// (spec, seed, sizes, format): `dapo demo-data` run anywhere reproduces the
// files shipped in inputs/demo/.
//
// Line schemas (one JSON object per line, keys in this order, "\n" ends):
//   train/val: {"data_source": "arith",
//               "prompt": [{"role": "user", "content": "<rendered problem>"}],
//               "ability": "arithmetic",
//               "reward_model": {"ground_truth": "62", "style": "rule"},
//               "extra_info": {"index": "train-17"}}
//   sft:       the same with "response": "<worked solution>" after "prompt"
//              (so data/dataset.h's loader reads an SFT file as prompts too).
// Indices are "<split>-<i>" strings, so prompt uids (dataset.h) differ across
// the three files and they may be loaded together.
//
// Splits are disjoint by problem text: validation problems come first, then
// training problems that are not validation problems, then SFT problems that
// are neither. Problem i of a split is drawn from the Philox stream
// (split, i, attempt) with attempt 0, 1, ... until it is new; so the
// validation set does not change when the training set grows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dapo/data/arithmetic_task.h"

namespace dapo::data {

inline constexpr const char* kArithmeticDataSource = "arith";

// How many times a split's problem is redrawn before a too-small problem
// space is reported.
inline constexpr int kArithmeticMaxDraws = 100;

struct ArithmeticSplitSizes {
  int64_t train = 0;
  int64_t val = 0;
  int64_t sft = 0;
};

struct ArithmeticSplits {
  std::vector<ArithmeticProblem> train, val, sft;
};

// UserError when no new problem turns up in kArithmeticMaxDraws draws (the
// difficulty has too few distinct problems for the sizes asked), or a size
// is negative.
ArithmeticSplits make_arithmetic_splits(const ArithmeticSpec& spec, uint64_t seed, const ArithmeticSplitSizes& sizes);

// One JSONL line (with its "\n") of the schemas above; `split` is "train",
// "val" or "sft" and names the index.
std::string arithmetic_prompt_line(const ArithmeticProblem& p, PromptFormat format, std::string_view split,
                                   int64_t index);
std::string arithmetic_sft_line(const ArithmeticProblem& p, PromptFormat format, int64_t index);

// The three files' texts.
struct ArithmeticFiles {
  std::string train, val, sft;
};
ArithmeticFiles render_arithmetic_files(const ArithmeticSplits& splits, PromptFormat format);

}  // namespace dapo::data
