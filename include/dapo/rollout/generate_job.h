// The work of `dapo generate --checkpoint C --input P.jsonl --output O.jsonl`
// (the app file stays thin): load this rank's model slices and the
// tokenizer, read and encode the prompts (generate_jsonl.h), generate with
// the engine, and have world rank 0 write every line back in input order.
//
// Parallelism: world = tp x dp (parallel.tp). The kept prompts are dealt
// to the dp groups round robin (prompt i to dp rank i % dp); each group's
// tp ranks generate together; tp rank 0 of every group sends its rollout
// batch to world rank 0. Responses do not depend on tp or dp (engine.h).
#pragma once

#include <cstdint>
#include <string>

#include "dapo/core/config.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/parallel/grid.h"
#include "dapo/rollout/engine.h"

namespace dapo::rollout {

struct GenerateJob {
  std::string checkpoint;  // --checkpoint; empty: model.path
  std::string input;       // prompts JSONL
  std::string output;      // written by world rank 0 (io::write_output_file: a file atomically, a device or FIFO in place)
  EngineOptions engine;
};

struct GenerateSummary {
  int64_t prompts = 0;    // prompts generated for (skipped ones excluded)
  int64_t skipped = 0;    // prompts left out by data.truncation = skip
  int64_t responses = 0;
  int64_t eos = 0;        // responses that ended with an EOS id
  int64_t tokens = 0;     // response tokens
  double seconds = 0;     // generation wall time (world rank 0's view)
};

// Collective over grid.world. Throws UserError (on every rank alike, except
// for a failure to write the output, which only rank 0 meets). The summary
// is complete on world rank 0 only.
// gpu: this rank's GPU (trainer/rank_device.h) for parallel.backend =
// cuda, nullptr for the CPU backend.
GenerateSummary run_generate_job(const Config& config, const GenerateJob& job, const parallel::Grid& grid,
                                 const ops::CudaDevice* gpu = nullptr);

}  // namespace dapo::rollout
