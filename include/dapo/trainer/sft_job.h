// The work of `dapo sft` (the app file stays thin): resolve the data and
// the model, run SftTrainer for its planned steps, record, and save.
//
// Files:
//   log.dir/config.ini          the resolved configuration (world rank 0)
//   log.dir/metrics.jsonl       one line per step (metrics_writer.h): train/loss,
//                               actor/grad_norm, actor/lr, perf/throughput,
//                               perf/total_num_tokens, train/response_tokens,
//                               timing_s/step
//   checkpoint.dir/sft_final.h5 the final model in the checkpoint layout of
//                               io/checkpoint.h (step = steps run, config =
//                               the resolved INI), loadable as model.path by
//                               `dapo train` / `generate` and exportable by
//                               `dapo export-hf`
//   checkpoint.dir/latest       one line, "sft_final.h5", written after the
//                               checkpoint is complete
// and one console line per step (DAPO_INFO on rank 0).
//
// Data: `data_path` (--data), else data.train_files (comma-separated
// files, read in order); sft_data.h gives the line forms.
//
// A finished model is kept (checkpoint.resume; an SFT model holds no
// optimizer state or data position, so it is never continued):
//   auto   checkpoint.dir/sft_final.h5 of at least the planned steps:
//          "nothing to do", exit 0, no file written (config.ini and
//          metrics.jsonl stay); of fewer steps: refused (UserError), as
//          starting over would replace it; none: a fresh run
//   never  a fresh run; refused if checkpoint.dir holds sft_final.h5
//   PATH   refused: start from a model with model.path instead
// Before anything is written, the output folders are checked and locked
// (run_guard.h): one run per folder, writable, room for the model.
#pragma once

#include <cstdint>
#include <string>

#include "dapo/core/config.h"
#include "dapo/parallel/grid.h"

namespace dapo::trainer {

inline constexpr const char* kSftCheckpointName = "sft_final.h5";

struct SftSummary {
  int64_t steps = 0;
  int64_t examples = 0;     // pairs loaded (after data.truncation)
  double first_loss = 0;    // train/loss of the first and the last step
  double last_loss = 0;
  std::string checkpoint;   // path of the final checkpoint
  bool nothing_to_do = false;  // checkpoint.dir held a finished run's model of >= the planned steps
  double seconds = 0;
};

// Collective over grid.world. Throws UserError on every rank alike (data,
// model and configuration errors), except for failures to write log files,
// which only rank 0 meets.
SftSummary run_sft_job(const Config& config, const std::string& data_path, const parallel::Grid& grid);

}  // namespace dapo::trainer
