// resume_training / save_training_state (checkpointing.h).
#include "dapo/trainer/checkpointing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/sharded_checkpoint.h"
#include "dapo/trainer/checkpoint_saver.h"
#include "dapo/trainer/run_files.h"

namespace dapo::trainer {
namespace fs = std::filesystem;
namespace {

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// Checkpoints of `dir` by step, newest first: step_* folders (format 3)
// and step_*.h5 files (formats 1 and 2, of older dapo runs); of one step,
// the folder first.
std::vector<std::pair<int64_t, std::string>> checkpoints_in(const std::string& dir) {
  static const std::regex name_re(R"(step_(\d+)(\.h5)?)");
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, name_re)) continue;
    const bool folder = !m[2].matched;
    if (folder != fs::is_directory(e.path(), ec)) continue;  // step_7.h5/ or a file step_7: not dapo's
    out.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  return out;
}

// The candidates of resume = auto, in the order to try them. `latest` naming
// a file that is gone (deleted by hand, or by an older dapo's pruning) is
// reported: the run then resumes from an older step than the user expects.
// `latest` names a file of its own folder (dapo writes a plain name): a
// path (`../../other/ck/step_00000004.h5`, an absolute one) would resume
// from, and prune beside, another run's checkpoints, so it is refused
// (UserError), its bytes escaped.
std::vector<std::string> auto_candidates(const Config& config, bool report) {
  const std::string& dir = config.checkpoint.dir;
  std::vector<std::string> out;
  const std::string latest_path = (fs::path(dir) / "latest").string();
  std::ifstream latest(latest_path);
  std::string name;
  if (latest && std::getline(latest, name) && !name.empty()) {
    if (name.find('/') != std::string::npos || name == "." || name == ".." || name.find('\0') != std::string::npos)
      throw UserError(cat(config.origin_of("checkpoint.dir"), ": checkpoint.dir: ", latest_path, " names '",
                          printable(name), "', not a file in ", dir,
                          " (latest holds a plain name such as step_00000004); write the name of one of ",
                          dir, "'s step_* checkpoints into it, or delete it to resume from the newest of them"));
    const std::string path = (fs::path(dir) / name).string();
    if (fs::exists(path))
      out.push_back(path);
    else if (report)
      DAPO_WARN("resume: ", latest_path, " names ", printable(path),
                ", which does not exist; trying the newest step_* checkpoint instead");
  }
  for (const auto& [step, path] : checkpoints_in(dir))
    if (std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
  return out;
}

// Loads `path` into params and optimizer. UserError (on every rank) on failure.
ResumePoint load_into(const std::string& path, const parallel::Grid& grid, model::ParamStore& params,
                      optim::AdamW& optimizer) {
  {
    const io::CheckpointReader reader(path, grid.world);
    std::string error;
    if (model::qwen2_config_to_json(reader.info().model) != model::qwen2_config_to_json(params.config()))
      error = cat(path, ": its model_config differs from the model of model.path (a checkpoint of another model?)");
    io::agree_on_error(grid.world, error);
  }
  std::map<std::string, std::vector<float>> m, v;
  auto staging = [](std::map<std::string, std::vector<float>>& map) -> io::SliceSink {
    return [&map](const model::ParamSpec& spec, const model::SliceSpec& slice) {
      std::vector<float>& buf = map[spec.name];
      buf.assign(size_t(elements(slice.local_shape)), 0.0f);
      return buf.data();
    };
  };
  model::ParamHostAccess host(params);
  const io::CheckpointInfo info = io::load_training_checkpoint(
      path, grid.world, grid.tp_rank, grid.tp_size,
      [&](const model::ParamSpec& spec, const model::SliceSpec&) { return host.write_target(params, spec.name); },
      staging(m), staging(v));
  host.finish(params);
  for (const auto& [name, buf] : m) optimizer.load_local(name, buf.data(), v.at(name).data(), int64_t(buf.size()));
  optimizer.set_steps_taken(info.state.optimizer_steps);
  ResumePoint p;
  p.path = path;
  p.step = info.step;
  p.optimizer_steps = info.state.optimizer_steps;
  p.order.seed = info.state.data_seed;
  p.order.size = info.state.data_size;
  p.order.cursor = {info.state.data_epoch, info.state.data_position};
  p.saved_tp = info.tp;
  p.saved_dp = info.dp;
  p.kv_cache_cap_bytes = info.state.kv_cache_cap_bytes;
  return p;
}

// The highest step of a step_* checkpoint in `dir` on any rank, -1 for none. Collective.
int64_t newest_checkpoint_step(const std::string& dir, const parallel::Comm& world) {
  const auto all = checkpoints_in(dir);
  std::vector<int64_t> newest{all.empty() ? -1 : all.front().first};
  world.all_reduce_i64(newest, parallel::ReduceOp::max);
  return newest[0];
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld", (long long)step);
  return name;
}

void prune_checkpoints(const Config& config, int64_t step) {
  if (config.checkpoint.keep_last <= 0) return;
  // Only checkpoints of earlier steps go: the one just written (which
  // `latest` names) and any of later steps stay. Later steps are there
  // when this run resumed from an earlier checkpoint (a PATH, or resume =
  // auto past a damaged newest one); counting them would delete this
  // run's newest checkpoint and leave `latest` naming a missing file.
  int64_t kept = 1;  // this step's
  for (const auto& [s, p] : checkpoints_in(config.checkpoint.dir)) {
    if (s >= step || kept++ < config.checkpoint.keep_last) continue;
    std::error_code ec;
    // A folder goes whole only if it is a checkpoint dapo wrote (its index
    // there); a symlink goes as a link, its target kept.
    if (fs::is_symlink(fs::symlink_status(p, ec)) || !fs::is_directory(p, ec))
      fs::remove(p, ec);
    else if (io::is_sharded_checkpoint(p))
      fs::remove_all(p, ec);
    else
      continue;
    if (ec) DAPO_WARN("checkpoint: cannot remove ", p, " (keep_last): ", ec.message());
  }
}

bool has_resume_candidate(const Config& config) {
  const std::string& mode = config.checkpoint.resume;
  if (mode == "never") return false;
  if (mode != "auto") return true;
  try {
    return !auto_candidates(config, false).empty();
  } catch (const UserError&) {
    return true;  // a `latest` naming another folder: resume_training refuses it
  }
}

std::optional<ResumePoint> resume_training(const Config& config, const parallel::Grid& grid,
                                           model::ParamStore& params, optim::AdamW& optimizer) {
  const std::string& mode = config.checkpoint.resume;
  const std::string& dir = config.checkpoint.dir;
  if (mode == "never") {
    // A fresh run writes step_00000001.h5 onwards and prunes by step: over
    // another run's checkpoints it would overwrite some and, with keep_last,
    // delete its own newest one in favour of the other run's higher steps.
    const int64_t newest = newest_checkpoint_step(dir, grid.world);
    if (newest >= 0)
      throw UserError(cat(config.origin_of("checkpoint.resume"), ": checkpoint.resume = never, but checkpoint.dir = ",
                          dir, " holds another run's checkpoints (newest: ",
                          (fs::path(dir) / checkpoint_name(newest)).string(),
                          "): move them away or choose another checkpoint.dir to start afresh, or resume from them "
                          "with checkpoint.resume = auto"));
    return std::nullopt;
  }
  if (mode != "auto") {
    if (!fs::exists(mode))
      throw UserError(cat(config.origin_of("checkpoint.resume"), ": checkpoint.resume = ", mode, ": no such file"));
    ResumePoint p = load_into(mode, grid, params, optimizer);
    const int64_t newest = newest_checkpoint_step(dir, grid.world);
    if (newest > p.step)
      DAPO_WARN("resume: checkpoint.dir = ", dir, " holds checkpoints past step ", p.step, " (newest: ",
                checkpoint_name(newest), "); this run overwrites each as it reaches its step, and keep_last "
                "prunes only checkpoints before the one it has just written");
    return p;
  }
  // Every rank lists the directory; rank 0's list is the one tried, so a
  // file system that shows ranks different views cannot split them.
  std::vector<std::string> candidates;
  std::string error;
  try {
    candidates = auto_candidates(config, grid.world_rank() == 0);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  std::vector<int64_t> count{int64_t(candidates.size())};
  grid.world.all_reduce_i64(count, parallel::ReduceOp::min);
  std::vector<std::string> failures;
  for (size_t i = 0; i < size_t(count[0]); ++i) {
    try {
      return load_into(candidates[i], grid, params, optimizer);
    } catch (const UserError& e) {
      DAPO_WARN("resume: cannot use ", candidates[i], ": ", e.what(),
                i + 1 < size_t(count[0]) ? "; trying the previous checkpoint" : "");
      failures.push_back(e.what());
    }
  }
  if (!failures.empty())
    throw UserError(cat("checkpoint.resume = auto: none of the ", failures.size(), " checkpoints in ",
                        config.checkpoint.dir, " loads (newest: ", failures.front(),
                        "); move them away to start afresh, or name one with checkpoint.resume = PATH"));
  return std::nullopt;
}

std::string save_training_state(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                                const optim::AdamW& optimizer, const data::PromptOrder& order, int64_t step,
                                int64_t kv_cache_cap_bytes) {
  CheckpointSaver saver(config, grid, params, optimizer, false);
  saver.start(step, order, kv_cache_cap_bytes);
  return (fs::path(config.checkpoint.dir) / checkpoint_name(step)).string();
}

}  // namespace dapo::trainer
