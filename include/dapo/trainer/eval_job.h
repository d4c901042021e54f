// The work of `dapo eval --checkpoint C --data D.jsonl`: the validation of
// validation.h on a model from a checkpoint or HF directory, with
// rollout.val_{n, temperature, top_p, top_k} - avg@k and pass@k per data
// source. With --output, world rank 0 writes the metrics as one JSON
// object ({"step": <the checkpoint's step, 0 for an HF directory>, ...}).
#pragma once

#include <string>

#include "dapo/core/config.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/validation.h"

namespace dapo::trainer {

struct EvalJob {
  std::string checkpoint;  // empty: model.path
  std::string data;        // comma-separated JSONL files; empty: data.val_files
  std::string output;      // empty: none
};

// Collective over grid.world. UserError on every rank alike (except a
// failure to write the output, which only rank 0 meets).
ValidationResult run_eval_job(const Config& config, const EvalJob& job, const parallel::Grid& grid);

}  // namespace dapo::trainer
