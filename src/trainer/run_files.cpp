// Resolved configuration, model snapshots and the `latest` pointer.
#include "dapo/trainer/run_files.h"

#include <filesystem>

#include "dapo/core/error.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/file_sync.h"

namespace dapo::trainer {
namespace fs = std::filesystem;

void write_file_atomically(const std::string& path, const std::string& text, const char* what) {
  io::write_output_file(path, text, what);  // synced, renamed, directory synced
}

void make_dir(const std::string& dir, const char* key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(cat(dir, ": cannot create the directory (", key, "): ", ec.message()));
}

void make_shared_dir(const std::string& dir, const char* key, const parallel::Grid& grid) {
  std::string error;
  if (grid.world_rank() == 0) {
    try {
      make_dir(dir, key);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(grid.world, error);
}

void write_run_config(const Config& config, const parallel::Grid& grid) {
  make_shared_dir(config.log.dir, "log.dir", grid);
  std::string error;
  if (grid.world_rank() == 0) {
    try {
      write_file_atomically((fs::path(config.log.dir) / "config.ini").string(), config_to_ini(config),
                            "resolved configuration");
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  io::agree_on_error(grid.world, error);
}

io::CheckpointInfo checkpoint_info(const Config& config, const parallel::Grid& grid, const model::Qwen2Config& model,
                                   int64_t step) {
  io::CheckpointInfo info;
  info.step = step;
  info.config_ini = config_to_ini(config);
  info.model = model;
  info.world_size = grid.world_size();
  info.tp = grid.tp_size;
  info.dp = grid.dp_size;
  return info;
}

void point_latest(const Config& config, const parallel::Grid& grid, const std::string& file_name,
                  const std::function<void()>& after) {
  std::string error;
  if (grid.world_rank() == 0) {
    try {
      write_latest(config.checkpoint.dir, file_name);
      if (after) after();
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
  make_shared_dir(config.checkpoint.dir, "checkpoint.dir", grid);
  const std::string path = (fs::path(config.checkpoint.dir) / file_name).string();
  model::ParamHostAccess host(params);
  // A master sharded over dp (ZeRO-1 on GPUs) is gathered to dp rank 0, the writer.
  io::SliceGather gather;
  if (params.master_sharded())
    gather = [&](const model::ParamSpec& spec, const model::SliceSpec&) { host.prefetch(spec.name, 0); };
  io::save_model_checkpoint(path, grid.world, io::ShardPlace::of(grid), checkpoint_info(config, grid, params.config(), step),
                            [&](const model::ParamSpec& spec, const model::SliceSpec&) -> const float* {
                              return host.read_source(spec.name);
                            },
                            {}, gather);
  point_latest(config, grid, file_name);
  return path;
}

}  // namespace dapo::trainer
