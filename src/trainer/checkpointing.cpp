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
#include "dapo/trainer/run_files.h"

namespace dapo::trainer {
namespace fs = std::filesystem;
namespace {

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// step_*.h5 files of `dir` by step, newest first.
std::vector<std::pair<int64_t, std::string>> checkpoints_in(const std::string& dir) {
  static const std::regex name_re(R"(step_(\d+)\.h5)");
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, name_re)) out.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
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
                          " (latest holds a plain file name such as step_00000004.h5); write the name of one of ",
                          dir, "'s step_*.h5 files into it, or delete it to resume from the newest of them"));
    const std::string path = (fs::path(dir) / name).string();
    if (fs::exists(path))
      out.push_back(path);
    else if (report)
      DAPO_WARN("resume: ", latest_path, " names ", printable(path),
                ", which does not exist; trying the newest step_*.h5 instead");
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
  return p;
}

// The highest step of a step_*.h5 in `dir` on any rank, -1 for none. Collective.
int64_t newest_checkpoint_step(const std::string& dir, const parallel::Comm& world) {
  const auto all = checkpoints_in(dir);
  std::vector<int64_t> newest{all.empty() ? -1 : all.front().first};
  world.all_reduce_i64(newest, parallel::ReduceOp::max);
  return newest[0];
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld.h5", (long long)step);
  return name;
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
                                const optim::AdamW& optimizer, const data::PromptOrder& order, int64_t step) {
  make_shared_dir(config.checkpoint.dir, "checkpoint.dir", grid);
  const std::string name = checkpoint_name(step);
  const std::string path = (fs::path(config.checkpoint.dir) / name).string();
  io::CheckpointInfo info = checkpoint_info(config, grid, params.config(), step);
  info.training = true;
  info.state.optimizer_steps = optimizer.steps_taken();
  info.state.rng_seed = uint64_t(config.train.seed);
  const data::PromptOrderState os = order.state();
  info.state.data_seed = os.seed;
  info.state.data_size = os.size;
  info.state.data_epoch = os.cursor.epoch;
  info.state.data_position = os.cursor.position;
  std::vector<float> m, v;  // one tensor's moments at a time
  model::ParamHostAccess host(params);
  // Sharded over dp (ZeRO-1): each tensor's moments (and on a GPU its fp32
  // master) are gathered to dp rank 0, the writer, before it is written.
  io::SliceGather gather;
  if (optimizer.sharded() || params.master_sharded())
    gather = [&](const model::ParamSpec& spec, const model::SliceSpec& slice) {
      const int64_t n = elements(slice.local_shape);
      const bool writer = grid.dp_rank == 0;
      m.resize(writer ? size_t(n) : 0);
      v.resize(writer ? size_t(n) : 0);
      optimizer.gather_local(spec.name, writer ? m.data() : nullptr, writer ? v.data() : nullptr, n, 0);
      host.prefetch(spec.name, 0);
    };
  auto moments = [&](bool first) -> io::SliceSource {
    return [&, first](const model::ParamSpec& spec, const model::SliceSpec& slice) -> const float* {
      if (!optimizer.sharded()) {
        const int64_t n = elements(slice.local_shape);
        m.resize(size_t(n));
        v.resize(size_t(n));
        optimizer.read_local(spec.name, m.data(), v.data(), n);
      }
      return first ? m.data() : v.data();
    };
  };
  try {
    io::save_training_checkpoint(
        path, grid.world, io::ShardPlace::of(grid), info, uint64_t(config.train.seed),
        [&](const model::ParamSpec& spec, const model::SliceSpec&) -> const float* {
          return host.read_source(spec.name);
        },
        moments(true), moments(false), gather);
  } catch (const UserError& e) {  // on every rank alike; the .partial is gone
    throw UserError(cat("checkpoint of step ", step, " not saved: ", e.what(), "; its temporary file was removed, ",
                        "and the checkpoints before it in checkpoint.dir = ", config.checkpoint.dir, " (",
                        config.origin_of("checkpoint.dir"), ") are whole: make room there and resume"));
  }
  point_latest(config, grid, name, [&] {
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
      fs::remove(p, ec);
      if (ec) DAPO_WARN("checkpoint: cannot remove ", p, " (keep_last): ", ec.message());
    }
  });
  return path;
}

}  // namespace dapo::trainer
