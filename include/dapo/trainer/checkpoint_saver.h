// CheckpointSaver: the training checkpoints of `dapo train`, saved at disk
// speed and, with checkpoint.async (the default), in the background
// (io/sharded_checkpoint.h for the folder, checkpointing.h for what is
// saved, names, `latest`, pruning and resume).
//
// A save: at a step boundary every rank copies what it writes - its part
// of the fp32 master weights and of both Adam moments, the part of its tp
// slice that its ZeRO-1 shard covers (without sharding, the same split of
// the buffer over the dp ranks, so that every rank of a node writes) -
// into host memory (pinned on a GPU). That copy is all the training loop
// waits for. A thread of the rank then writes the copy to the rank's file
// and syncs it, while the next steps run; at a later step boundary, once
// every rank's write is done, the ranks commit together: the index, the
// rename of the folder, `latest`, the pruning of old checkpoints. At most
// one save is in flight: a new one first finishes the one before.
// finish() waits for it (the end of the run, a stop signal: a save in
// flight completes before the exit code 4).
//
// Host memory: host_bytes(), about 12 bytes per parameter of the rank's
// tp slice divided by dp (32B at tp 8 x dp 16: 3 GB), allocated and touched
// when the saver is made and held to the end of the run.
//
// A crash during the write leaves <step>.partial/, never a folder under a
// checkpoint's name: `latest` and resume = auto see only committed ones.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "dapo/core/config.h"
#include "dapo/data/prompt_order.h"
#include "dapo/io/sharded_checkpoint.h"
#include "dapo/model/param_store.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"

namespace dapo::trainer {

class CheckpointSaver {
 public:
  // The store, optimizer and grid must outlive the saver. async: write in
  // the background (config.checkpoint.async by default).
  CheckpointSaver(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                  const optim::AdamW& optimizer);
  CheckpointSaver(const Config& config, const parallel::Grid& grid, const model::ParamStore& params,
                  const optim::AdamW& optimizer, bool async);
  // Waits for a write in flight; a save not committed is removed
  // (collective, as the writer's removal is).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Saves the state after `step` steps (prompt order `order`, the engine's
  // pinned KV cap `kv_cache_cap_bytes`, DapoTrainer's): finishes a
  // save in flight, snapshots, and writes (in the background when async;
  // here, then committed, otherwise). Returns the path of the save it
  // committed, "" if none: the one in flight before, or (not async) this
  // one. Collective over grid.world. UserError on every rank alike (the
  // .partial folder removed).
  std::string start(int64_t step, const data::PromptOrder& order, int64_t kv_cache_cap_bytes = 0);
  // At a step boundary: commits the save in flight once every rank's write
  // is done. Returns its path, "" when nothing was committed. Collective
  // (one small all-reduce while a save is in flight, nothing otherwise).
  std::string poll();
  // Waits for the save in flight and commits it; its path, "" if none. Collective.
  std::string finish();

  // Seconds this rank's share would take to write at the speed of a probe:
  // min(host_bytes(), 256 MiB) written and synced to checkpoint.dir by every
  // rank at once (so the ranks of a node share the disk as in a save), the
  // slowest rank's. Collective. Runs no save; UserError if the probe cannot
  // be written.
  double probe_save_s() const;

  bool in_flight() const { return writer_ != nullptr; }
  // The step of the save in flight (-1: none).
  int64_t step_in_flight() const { return writer_ ? step_ : -1; }
  // This rank's snapshot memory.
  size_t host_bytes() const { return size_t(plan_.elements) * sizeof(float); }
  // Seconds the caller waited in the last start() (the snapshot; with
  // async nothing else, unless a save was still in flight), and this
  // rank's write of the last save committed.
  double last_stall_s() const { return stall_s_; }
  double last_write_s() const { return write_s_; }

 private:
  void snapshot();
  std::string commit();  // joins and commits the writer in flight

  const Config& config_;
  const parallel::Grid& grid_;
  const model::ParamStore& params_;
  const optim::AdamW& optimizer_;
  bool async_ = true;
  io::ShardedSavePlan plan_;
  float* host_ = nullptr;  // plan_.elements floats, pinned on a GPU
  std::unique_ptr<io::ShardedCheckpointWriter> writer_;
  std::thread thread_;
  std::atomic<bool> written_{false};
  int64_t step_ = -1;
  double stall_s_ = 0, write_s_ = 0;
};

}  // namespace dapo::trainer
