// How long `dapo train` runs: train.total_steps steps when it is > 0, else
// train.total_epochs passes over the training prompts (the prompt order
// reshuffles between passes). verl's DAPO run makes one pass over a parquet
// that holds each DAPO-Math-17k prompt ~100 times; dapo reads the
// deduplicated prompts, so its recipe sets total_epochs = 100 instead.
//
// In passes, the run ends after the step in which the last pass handed out
// its last prompt. Every step takes one generation round of
// rollout.gen_batch_size prompts or more (dynamic sampling may take
// several), so the passes plan at most ceil(epochs * prompts /
// gen_batch_size) steps; this bound is what the console's "step N/M" and
// `dapo info` show, and the run also stops there.
#pragma once

#include <cstdint>
#include <string>

#include "dapo/core/config.h"

namespace dapo::trainer {

struct RunLength {
  int64_t steps = 0;          // the planned steps: exact (total_steps) or the bound of the passes
  bool by_epochs = false;     // total_steps = 0: the passes decide
  int64_t epochs = 0;         // by_epochs: train.total_epochs
  int64_t rounds = 0;         // by_epochs: generation rounds the passes hold
};

// `train_prompts`: the training prompts after loading (>= 1).
RunLength plan_run_length(const Config& config, int64_t train_prompts);

// The planned steps for the console and `dapo info`, e.g. "100
// (train.total_steps)" or "at most 1167 (train.total_epochs = 100 passes
// over 17917 prompts: 1167 generation rounds of ...)".
std::string describe(const RunLength& r, const Config& config, int64_t train_prompts);

// Whether the run is over after `steps_done` steps with the prompt order in
// pass `epoch` (0-based: 1 once the first pass is used up).
bool run_finished(const RunLength& r, int64_t steps_done, int64_t epoch);

}  // namespace dapo::trainer
