// Training checkpoints of `dapo train` (docs/DESIGN.md section 4, io/checkpoint.h
// for the file): what is saved, when, where, and where a run resumes from.
//
// Saved: the fp32 master weights, both AdamW moments and its step count,
// the generator key (train.seed: all of dapo's randomness is counter-based,
// keyed by (seed, step, round, prompt uid, sample)), the prompt order's
// position, the step, and the resolved configuration. Everything else a
// step depends on is a function of these, so N steps in one run and N/2 +
// restart + N/2 end in bitwise identical weights and metrics on the CPU
// backend (tests/trainer/test_resume.cpp).
//
// Files: checkpoint.dir/step_%08d/, a folder with a file per rank and an
// index (io/sharded_checkpoint.h; atomic: written as .partial/, synced,
// renamed; saved in the background by CheckpointSaver), then
// checkpoint.dir/latest names it (atomic too); then, of the checkpoints
// of earlier steps, those beyond the newest checkpoint.keep_last - 1 are
// deleted - only after the new one is complete, so an interrupted save
// leaves the previous ones loadable. The new checkpoint and any of later
// steps are never deleted: `latest` always names an existing checkpoint.
// step_%08d.h5 files of older dapo versions (one file, format 2) still
// resume, and count as checkpoints for all of the above.
//
// Resume (checkpoint.resume):
//   auto   the checkpoint `latest` names (a warning when that file is gone),
//          else the newest step_* checkpoint; one that fails to load (damaged,
//          truncated, digest mismatch, negative step, non-finite values) is
//          reported with a warning and the previous one is tried; if every
//          candidate fails, the run stops (UserError) rather than silently
//          starting over; no checkpoint at all: a fresh start from model.path
//   never  a fresh start from model.path; a UserError if checkpoint.dir
//          already holds step_* checkpoints (another run's: this one would
//          overwrite and prune them)
//   PATH   that checkpoint (folder or file); failing to load it is a UserError. Checkpoints of
//          later steps in checkpoint.dir are kept (with a warning) until
//          this run overwrites them
// The checkpoint's model must be the model.path model's architecture (its
// weights are replaced). Resharding is loading: a checkpoint saved with any
// tp and dp resumes with any other. The prompt order is global (every rank
// computes the same batches and takes its dp share), so it carries over to
// any dp; responses depend on no rank count either, so a resumed run with
// another dp continues the same trajectory up to float rounding of the
// reductions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dapo/core/config.h"
#include "dapo/data/prompt_order.h"
#include "dapo/model/param_store.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"

namespace dapo::trainer {

// "step_00000042": the folder of a format-3 checkpoint (io/sharded_checkpoint.h).
std::string checkpoint_name(int64_t step);

// Of checkpoint.dir's checkpoints of steps before `step`, deletes those
// beyond the newest checkpoint.keep_last - 1 (0: none). Rank 0's, after
// `latest` names the new one; folders only if they are dapo's checkpoints.
void prune_checkpoints(const Config& config, int64_t step);

struct ResumePoint {
  std::string path;
  int64_t step = 0;                 // steps done at the save
  int64_t optimizer_steps = 0;      // already restored into the optimizer
  data::PromptOrderState order;     // restore into the trainer's PromptOrder
  int64_t saved_tp = 1, saved_dp = 1;  // the layout that wrote it
  int64_t kv_cache_cap_bytes = 0;      // DapoTrainer::restore_kv_cache_cap
};

// Whether resume_training has a checkpoint to try (a file named by
// checkpoint.resume, or with auto a `latest` or step_*.h5 in checkpoint.dir);
// a candidate that then fails to load still stops the run. Reads the folder,
// loads nothing; not collective.
bool has_resume_candidate(const Config& config);

// Chooses and loads the checkpoint to resume from (see above) into `params`
// and `optimizer`. nullopt: a fresh start. Collective over grid.world;
// UserErrors are raised on every rank alike.
std::optional<ResumePoint> resume_training(const Config& config, const parallel::Grid& grid,
                                           model::ParamStore& params, optim::AdamW& optimizer);

// Saves the training state after `step` steps now (CheckpointSaver, not in
// the background), points `latest` at it and prunes old checkpoints.
// Returns the folder's path. Collective over grid.world.
std::string save_training_state(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                                const optim::AdamW& optimizer, const data::PromptOrder& order, int64_t step,
                                int64_t kv_cache_cap_bytes = 0);

}  // namespace dapo::trainer
