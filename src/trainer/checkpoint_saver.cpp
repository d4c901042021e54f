// CheckpointSaver (checkpoint_saver.h).
#include "dapo/trainer/checkpoint_saver.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "dapo/core/clock.h"
#include "dapo/core/device_runtime.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/file_sync.h"
#include "dapo/optim/shard_layout.h"
#include "dapo/trainer/checkpointing.h"
#include "dapo/trainer/run_files.h"

namespace dapo::trainer {
namespace fs = std::filesystem;
namespace {

// The flat spans this rank writes: its optimizer shard, or without one the
// same partition of the buffer over dp (so that dp replicas share the writing).
std::vector<model::ShardRange> write_ranges(const parallel::Grid& grid, const model::ParamStore& params,
                                            const optim::AdamW& optimizer) {
  if (optimizer.sharded()) return optimizer.layout().ranges();
  return optim::ShardLayout(params.buffer_elements(), grid.dp_size, grid.dp_rank).ranges();
}

// Where flat element `flat` of a buffer lives: `base` is the whole buffer,
// or, with `compact` spans, the rank's compact shard of them.
const float* locate(const float* base, const std::vector<model::ShardRange>* compact, int64_t flat, int64_t n) {
  if (compact == nullptr) return base + flat;
  const auto it = std::upper_bound(compact->begin(), compact->end(), flat,
                                   [](int64_t f, const model::ShardRange& r) { return f < r.begin; });
  DAPO_CHECK(it != compact->begin(), "checkpoint snapshot: element ", flat, " is not in this rank's shard");
  const model::ShardRange& r = *(it - 1);
  DAPO_CHECK(flat + n <= r.end, "checkpoint snapshot: elements ", flat, "..", flat + n, " leave the span ", r.begin,
             "..", r.end);
  return base + r.shard_offset + (flat - r.begin);
}

}  // namespace

CheckpointSaver::CheckpointSaver(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                                 const optim::AdamW& optimizer)
    : CheckpointSaver(config, grid, params, optimizer, config.checkpoint.async) {}

CheckpointSaver::CheckpointSaver(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                                 const optim::AdamW& optimizer, bool async)
    : config_(config), grid_(grid), params_(params), optimizer_(optimizer), async_(async) {
  std::vector<int64_t> offsets;
  for (const model::ParamEntry& e : params.entries()) offsets.push_back(e.offset);
  plan_ = io::plan_sharded_save(params.config(), io::ShardPlace::of(grid), grid.world_rank(), offsets,
                                write_ranges(grid, params, optimizer), true);
  // Allocated and touched now: first-touch page faults of gigabytes (seconds
  // on a VM) must not stall the first save's step.
  if (plan_.elements > 0) {
    const size_t bytes = size_t(plan_.elements) * sizeof(float);
    host_ = params.device() == Device::cpu ? new float[size_t(plan_.elements)]
                                           : static_cast<float*>(device_runtime::alloc_pinned(bytes));
    std::memset(host_, 0, bytes);
  }
}

CheckpointSaver::~CheckpointSaver() {
  if (thread_.joinable()) thread_.join();
  writer_.reset();  // not committed: its folder is removed
  if (host_ == nullptr) return;
  if (params_.device() == Device::cpu)
    delete[] host_;
  else
    device_runtime::free_pinned(host_);
}

void CheckpointSaver::snapshot() {
  const bool master_compact = params_.master_sharded();
  const bool moments_compact = optimizer_.sharded();
  const std::vector<model::ShardRange>* shard = moments_compact ? &optimizer_.layout().ranges() : nullptr;
  const float* sources[3] = {
      master_compact ? params_.master_shard().ptr<float>() : params_.parameters().ptr<float>(),
      optimizer_.exp_avg().ptr<float>(), optimizer_.exp_avg_sq().ptr<float>()};
  const std::vector<model::ShardRange>* compact[3] = {master_compact ? &params_.master_shards().mine() : nullptr,
                                                      shard, shard};
  const size_t families = plan_.tensors.size() / params_.entries().size();
  for (size_t i = 0; i < plan_.pieces.size(); ++i) {
    const io::ShardPiece& p = plan_.pieces[i];
    const size_t family = size_t(p.tensor) / params_.entries().size();
    DAPO_CHECK(family < families, "checkpoint snapshot: piece of tensor ", p.tensor);
    const int64_t n = p.end - p.begin;
    const float* src = locate(sources[family], compact[family], plan_.flat_begin[i], n);
    if (params_.device() == Device::cpu)
      std::memcpy(host_ + p.offset, src, size_t(n) * sizeof(float));
    else
      device_runtime::copy_async(host_ + p.offset, src, size_t(n) * sizeof(float),
                                 device_runtime::CopyKind::device_to_host, params_.stream(), "checkpoint snapshot");
  }
  if (params_.device() != Device::cpu) device_runtime::synchronize(params_.stream(), "checkpoint snapshot");
}

std::string CheckpointSaver::start(int64_t step, const data::PromptOrder& order, int64_t kv_cache_cap_bytes) {
  const auto t0 = Clock::now();
  const std::string before = finish();
  make_shared_dir(config_.checkpoint.dir, "checkpoint.dir", grid_);
  const std::string path = (fs::path(config_.checkpoint.dir) / checkpoint_name(step)).string();
  io::CheckpointInfo info = checkpoint_info(config_, grid_, params_.config(), step);
  info.training = true;
  info.state.optimizer_steps = optimizer_.steps_taken();
  info.state.rng_seed = uint64_t(config_.train.seed);
  const data::PromptOrderState os = order.state();
  info.state.data_seed = os.seed;
  info.state.data_size = os.size;
  info.state.data_epoch = os.cursor.epoch;
  info.state.data_position = os.cursor.position;
  info.state.kv_cache_cap_bytes = kv_cache_cap_bytes;
  try {
    writer_ = std::make_unique<io::ShardedCheckpointWriter>(path, grid_.world, info, plan_, uint64_t(config_.train.seed));
  } catch (const UserError& e) {  // on every rank alike; the .partial is gone
    throw UserError(cat("checkpoint of step ", step, " not saved: ", e.what(), "; the checkpoints before it in ",
                        "checkpoint.dir = ", config_.checkpoint.dir, " (", config_.origin_of("checkpoint.dir"),
                        ") are whole: make room there and resume"));
  }
  step_ = step;
  snapshot();
  written_ = false;
  if (async_) {
    thread_ = std::thread([this] {
      // Stop signals go to the training thread, which polls for them.
      sigset_t block;
      sigemptyset(&block);
      for (const int s : {SIGUSR1, SIGTERM, SIGINT, SIGHUP}) sigaddset(&block, s);
      pthread_sigmask(SIG_BLOCK, &block, nullptr);
      writer_->write(host_);
      written_ = true;
    });
    stall_s_ = seconds_since(t0);
    return before;
  }
  writer_->write(host_);
  written_ = true;
  stall_s_ = seconds_since(t0);
  return commit();
}

double CheckpointSaver::probe_save_s() const {
  make_shared_dir(config_.checkpoint.dir, "checkpoint.dir", grid_);
  const size_t share = host_bytes();
  const size_t bytes = std::min(share, size_t(256) << 20);
  const std::string probe = (fs::path(config_.checkpoint.dir) / cat(".dapo_write_probe.", grid_.world_rank())).string();
  std::string error;
  double seconds = 0;
  grid_.world.barrier();
  if (bytes > 0) {
    const auto t0 = Clock::now();
    try {
      const int fd = io::create_temporary(probe, "write-speed probe", 0600);
      const char* at = reinterpret_cast<const char*>(host_);
      for (size_t done = 0; done < bytes && error.empty();) {
        const ssize_t w = ::write(fd, at + done, bytes - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) error = cat(probe, ": cannot write the write-speed probe: ", w < 0 ? std::strerror(errno) : "no progress");
        else done += size_t(w);
      }
      if (error.empty() && ::fsync(fd) != 0) error = cat(probe, ": cannot sync the write-speed probe: ", std::strerror(errno));
      ::close(fd);
      std::error_code ec;
      fs::remove(probe, ec);
    } catch (const UserError& e) {
      error = e.what();
    }
    seconds = seconds_since(t0) * double(share) / double(bytes);
  }
  io::agree_on_error(grid_.world, error);
  return grid_.world.all_reduce_f64(seconds, parallel::ReduceOp::max);
}

std::string CheckpointSaver::poll() {
  if (!in_flight()) return {};
  if (grid_.world.all_reduce_i64(written_ ? 1 : 0, parallel::ReduceOp::min) == 0) return {};
  return commit();
}

std::string CheckpointSaver::finish() {
  if (!in_flight()) return {};
  return commit();
}

std::string CheckpointSaver::commit() {
  if (thread_.joinable()) thread_.join();
  std::unique_ptr<io::ShardedCheckpointWriter> writer = std::move(writer_);
  write_s_ = writer->write_seconds();
  const int64_t step = step_;
  try {
    writer->commit();
  } catch (const UserError& e) {
    throw UserError(cat("checkpoint of step ", step, " not saved: ", e.what(), "; its temporary folder was removed, ",
                        "and the checkpoints before it in checkpoint.dir = ", config_.checkpoint.dir, " (",
                        config_.origin_of("checkpoint.dir"), ") are whole: make room there and resume"));
  }
  point_latest(config_, grid_, checkpoint_name(step), [&] { prune_checkpoints(config_, step); });
  return writer->path();
}

}  // namespace dapo::trainer
