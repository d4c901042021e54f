// Resolved configuration, model snapshots and the `latest` pointer.
#include "dapo/trainer/run_files.h"

#include <filesystem>
#include <fstream>

#include "dapo/core/error.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/file_sync.h"

namespace dapo::trainer {
namespace fs = std::filesystem;

void write_file_atomically(const std::string& path, const std::string& text, const char* what) {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!(out << text) || !(out.flush())) throw UserError(cat(path, ": cannot write the ", what));
  }
  io::commit_file(partial, path);  // synced, renamed, directory synced
}

void make_dir(const std::string& dir, const char* key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(cat(dir, ": cannot create the directory (", key, "): ", ec.message()));
}

void write_run_config(const Config& config, const parallel::Grid& grid) {
  std::string error;
  if (grid.world_rank() == 0) {
    try {
      make_dir(config.log.dir, "log.dir");
      write_file_atomically((fs::path(config.log.dir) / "config.ini").string(), config_to_ini(config),
                            "resolved configuration");
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(grid.world, error);
}

void write_latest(const std::string& dir, const std::string& file_name) {
  write_file_atomically((fs::path(dir) / "latest").string(), file_name + "\n", "latest-checkpoint pointer");
}

std::string save_model_snapshot(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                                int64_t step, const std::string& file_name) {
  const bool root = grid.world_rank() == 0;
  std::string error;
  if (root) {
    try {
      make_dir(config.checkpoint.dir, "checkpoint.dir");
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(grid.world, error);
  const std::string path = (fs::path(config.checkpoint.dir) / file_name).string();
  io::CheckpointInfo info;
  info.step = step;
  info.config_ini = config_to_ini(config);
  info.model = params.config();
  info.world_size = grid.world_size();
  info.tp = grid.tp_size;
  info.dp = grid.dp_size;
  io::save_model_checkpoint(path, grid.world, io::ShardPlace::of(grid), info,
                            [&](const model::ParamSpec& spec, const model::SliceSpec&) -> const float* {
                              return params.param(spec.name).ptr<float>();
                            });
  error.clear();
  if (root) {
    try {
      write_latest(config.checkpoint.dir, file_name);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(grid.world, error);
  return path;
}

}  // namespace dapo::trainer
