// The files every training command (`dapo sft`, `dapo train`) writes beside
// its work: the resolved configuration in log.dir, and model snapshots in
// checkpoint.dir with the `latest` pointer. Writes are atomic (a .partial
// file renamed into place), so a job killed mid-write leaves the previous
// file whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "dapo/core/config.h"
#include "dapo/io/checkpoint.h"
#include "dapo/model/param_store.h"
#include "dapo/parallel/grid.h"

namespace dapo::trainer {

// Writes `text` to path.partial, syncs it and renames it to `path` (then
// syncs the directory); io::write_output_file: a device or FIFO is written
// in place, a symlink's target is written. UserError naming the file (and
// `what` it is) on failure.
void write_file_atomically(const std::string& path, const std::string& text, const char* what);

// Creates `dir` and its parents; UserError naming `dir` and the config `key`.
void make_dir(const std::string& dir, const char* key);
// The same by world rank 0 for all: collective over grid.world, a failure
// is thrown on every rank.
void make_shared_dir(const std::string& dir, const char* key, const parallel::Grid& grid);

// The root attributes of a checkpoint this run writes after `step` steps.
io::CheckpointInfo checkpoint_info(const Config& config, const parallel::Grid& grid, const model::Qwen2Config& model,
                                   int64_t step);

// World rank 0 creates log.dir and writes log.dir/config.ini (the resolved
// configuration). Collective over grid.world: a failure is thrown on every rank.
void write_run_config(const Config& config, const parallel::Grid& grid);

// Writes `dir`/latest naming `file_name` (atomically). UserError naming the
// file on failure.
void write_latest(const std::string& dir, const std::string& file_name);
// World rank 0 writes checkpoint.dir/latest naming `file_name`, then runs
// `after` (e.g. pruning old checkpoints); collective over grid.world, a
// failure is thrown on every rank.
void point_latest(const Config& config, const parallel::Grid& grid, const std::string& file_name,
                  const std::function<void()>& after = {});

// Saves the weights of `params` as checkpoint.dir/`file_name` in the
// checkpoint layout of io/checkpoint.h (step `step`, config = the resolved
// INI), then points checkpoint.dir/latest at it. Returns the file's path.
// Collective over grid.world; failures are thrown on every rank.
std::string save_model_snapshot(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                                int64_t step, const std::string& file_name);

}  // namespace dapo::trainer
