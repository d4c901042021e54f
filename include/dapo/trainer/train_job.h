// The work of `dapo train` (the app file stays thin): load the model,
// tokenizer and prompt sets, run DapoTrainer for its steps with validation
// on its schedule, record every step, and save the final model.
//
// Files:
//   log.dir/config.ini              the resolved configuration
//   log.dir/metrics.jsonl           one line per step (step_metrics.h; validation
//                                   metrics join the line of the step they follow;
//                                   step 0 holds the validation before training)
//   checkpoint.dir/step_%08d.h5     training checkpoints every checkpoint.save_every
//                                   steps and at the end (checkpointing.h), each
//                                   followed by checkpoint.dir/latest naming it
// The run resumes per checkpoint.resume (checkpointing.h) and then runs
// until train.total_steps steps are done in all.
//   dump.dir/step_%08d.h5           rollout dumps every dump.every steps (step_dump.h)
// Console (world rank 0): a line per step, a progress line every few
// seconds during generation, validation results.
//
// Steps: train.total_steps, or with 0 train.total_epochs passes over the
// training prompts (run_length.h; dynamic sampling draws a varying number
// of prompts per step).
#pragma once

#include <cstdint>
#include <string>

#include "dapo/core/config.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/stop_signals.h"

namespace dapo::trainer {

struct TrainSummary {
  std::string resumed_from;            // the checkpoint resumed from; empty: a fresh start
  int64_t first_step = 0;              // steps done before this run (the resumed checkpoint's step)
  int64_t steps = 0;                   // steps done at the end
  int stop_signal = 0;                 // SIGUSR1/SIGTERM/SIGINT/SIGHUP that stopped the run early (checkpoint saved); 0: none
  double first_acc = 0, last_acc = 0;  // gen/acc/mean of this run's first and last step
  bool validated = false;              // data.val_files given: val_* below are set
  int64_t val_k = 0;
  double val_first = 0, val_last = 0;  // avg@k over every validation problem: first and last validation
  int64_t val_first_step = 0, val_last_step = 0;
  std::string checkpoint;              // the final model
  double seconds = 0;
};

// Collective over grid.world. UserError on every rank alike for bad
// configuration, data or model, and when dynamic sampling runs out of
// generation rounds (the steps done so far are in metrics.jsonl).
// `signals` (installed by the caller for the whole process life, so that a
// signal arriving during set-up or after training, while MPI finalises,
// does not kill a rank) stops the run at the next step boundary.
TrainSummary run_train_job(const Config& config, const parallel::Grid& grid, const StopSignals& signals);

}  // namespace dapo::trainer
