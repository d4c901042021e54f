// Training-checkpoint timings shared by bench_io (CPU ranks) and
// bench_checkpoint_gpu (GPU ranks): for the state of `params` and `opt`,
// all ranks of `grid` together, the same state each way:
//   train_shared_file_mb_s   format 2: one parallel-HDF5 file, ZeRO-1 shards
//                            gathered to dp rank 0 (the layout before format 3)
//   train_sharded_mb_s       format 3 (CheckpointSaver, not in the background):
//                            a file per rank + index, at sync_save_s
//   async_save_stall_s       the same save in the background: what the step
//                            waits for (the snapshot to host memory; the
//                            slowest rank's)
//   async_save_total_s       from that start to the commit
//   resume_s, train_load_mb_s  resume_training of the sharded checkpoint
//                            (digests verified; every rank reads its tp slice)
//   raw_rank_write_mb_s      every rank write()s + fsyncs its share of the
//                            same bytes to a file of its own: the disk's aggregate
// MB = 10^6 bytes; the checkpoint holds 12 bytes per parameter.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/core/config.h"
#include "dapo/data/prompt_order.h"
#include "dapo/io/checkpoint.h"
#include "dapo/model/param_store.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/checkpoint_saver.h"
#include "dapo/trainer/checkpointing.h"

namespace dapo::bench {

// A fresh folder <prefix>_XXXXXX made by rank 0, its name known to every
// rank ("" if it could not be made).
inline std::string shared_tmp_dir(const parallel::Comm& world, const std::string& prefix) {
  std::string name;
  if (world.rank() == 0) {
    std::string tmpl = prefix + "_XXXXXX";
    if (mkdtemp(tmpl.data())) name = tmpl;
  }
  std::vector<std::vector<std::byte>> to_each(size_t(world.size()));
  if (world.rank() == 0)
    for (auto& b : to_each)
      b.assign(reinterpret_cast<const std::byte*>(name.data()), reinterpret_cast<const std::byte*>(name.data()) + name.size());
  const std::vector<std::byte> got = world.all_to_all_v(to_each);
  return std::string(reinterpret_cast<const char*>(got.data()), got.size());
}

// JSON fields (no braces). `shared_file`: also time format 2 (slow: skip it
// for big models).
inline std::string checkpoint_bench(const parallel::Grid& grid, model::ParamStore& params, optim::AdamW& opt,
                                    const std::filesystem::path& dir, bool shared_file = true) {
  namespace fs = std::filesystem;
  const parallel::Comm& world = grid.world;
  Config cfg;
  cfg.checkpoint.dir = (dir / "ck").string();
  cfg.checkpoint.keep_last = 0;
  const data::PromptOrder order(100, 1);
  int64_t elements = 0;
  for (const auto& s : model::qwen2_param_specs(params.config())) {
    int64_t n = 1;
    for (const int64_t d : s.shape) n *= d;
    elements += n;
  }
  const double mb = 3.0 * double(elements) * 4 / 1e6;  // weights and both moments
  auto timed = [&](auto&& f) {
    world.barrier();
    const auto t0 = Clock::now();
    f();
    world.barrier();
    return world.all_reduce_f64(seconds_since(t0), parallel::ReduceOp::max);
  };

  double shared_s = 0;
  if (shared_file) {
    // Format 2: one shared file, the shards gathered to dp rank 0 (as before format 3).
    std::vector<float> m, v;
    model::ParamHostAccess host(params);
    const io::SliceGather gather = [&](const model::ParamSpec& spec, const model::SliceSpec& slice) {
      int64_t n = 1;
      for (const int64_t d : slice.local_shape) n *= d;
      const bool writer = grid.dp_rank == 0;
      m.resize(writer ? size_t(n) : 0);
      v.resize(writer ? size_t(n) : 0);
      opt.gather_local(spec.name, writer ? m.data() : nullptr, writer ? v.data() : nullptr, n, 0);
      host.prefetch(spec.name, 0);
    };
    io::CheckpointInfo info;
    info.model = params.config();
    info.training = true;
    info.world_size = world.size();
    info.tp = grid.tp_size;
    info.dp = grid.dp_size;
    shared_s = timed([&] {
      io::save_training_checkpoint(
          (dir / "shared.h5").string(), world, io::ShardPlace::of(grid), info, 1,
          [&](const model::ParamSpec& spec, const model::SliceSpec&) -> const float* { return host.read_source(spec.name); },
          [&](const model::ParamSpec&, const model::SliceSpec&) -> const float* { return m.data(); },
          [&](const model::ParamSpec&, const model::SliceSpec&) -> const float* { return v.data(); }, gather);
    });
    if (world.rank() == 0) fs::remove(dir / "shared.h5");
  }
  // Format 3, at once and in the background.
  double sync_s = 0, stall_s = 0, total_s = 0;
  size_t share = 0;
  {
    trainer::CheckpointSaver at_once(cfg, grid, params, opt, false);
    share = at_once.host_bytes();
    sync_s = timed([&] { at_once.start(1, order); });
  }
  {
    trainer::CheckpointSaver background(cfg, grid, params, opt, true);
    total_s = timed([&] {
      background.start(2, order);
      stall_s = world.all_reduce_f64(background.last_stall_s(), parallel::ReduceOp::max);
      background.finish();
    });
  }
  if (world.rank() == 0) fs::remove_all(dir / "ck" / trainer::checkpoint_name(2));  // room on small disks
  // Each rank's share of the same bytes, written plainly to a file of its own.
  std::vector<char> bytes(std::min<size_t>(share, size_t(64) << 20), 1);
  const std::string raw = (dir / ("raw_" + std::to_string(world.rank()) + ".bin")).string();
  const double raw_s = timed([&] {
    const int fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (size_t left = share; left > 0 && fd >= 0;) {
      const ssize_t w = ::write(fd, bytes.data(), std::min(left, bytes.size()));
      if (w <= 0) break;
      left -= size_t(w);
    }
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  });
  fs::remove(raw);
  // Resume: weights and moments into the store and optimizer.
  cfg.checkpoint.resume = (dir / "ck" / trainer::checkpoint_name(1)).string();
  const double resume_s = timed([&] { trainer::resume_training(cfg, grid, params, opt); });
  char out[1024];
  std::snprintf(out, sizeof out,
                "\"ranks\": %d, \"tp\": %d, \"train_checkpoint_mb\": %.0f, \"train_shared_file_mb_s\": %.0f, "
                "\"train_sharded_mb_s\": %.0f, \"raw_rank_write_mb_s\": %.0f, \"sync_save_s\": %.3f, "
                "\"async_save_stall_s\": %.4f, \"async_save_total_s\": %.3f, \"resume_s\": %.3f, "
                "\"train_load_mb_s\": %.0f, \"snapshot_host_bytes_per_rank\": %zu",
                world.size(), int(grid.tp_size), mb, shared_file ? mb / shared_s : 0.0, mb / sync_s, mb / raw_s, sync_s,
                stall_s, total_s, resume_s, mb / resume_s, share);
  return out;
}

}  // namespace dapo::bench
