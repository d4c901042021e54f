// The per-step metadata of the engine (tokens, positions, block tables,
// copy-on-write pairs, random-stream keys) packed into one host block and,
// on a GPU, sent in ONE host-to-device copy per step: plan on the host,
// then run on the device, as flashinfer does. The views that add() returns
// point where the ops will read them: into the host block on the CPU
// backend, into the device mirror on CUDA (valid once upload() is queued).
// Two host blocks take turns, so that a step can be packed while the
// previous step's upload is still queued (the engine's launch-ahead); the
// device mirror is one block, whose copies the stream orders, so that a
// captured decode graph reads the same addresses at every replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "dapo/core/arena.h"
#include "dapo/ops/context.h"

namespace dapo::rollout {

class StepStaging {
 public:
  // capacity_bytes: the most one step packs (arrays rounded up to 16 bytes).
  StepStaging(size_t capacity_bytes, const ops::Ctx& ctx);

  // Starts a step in the other host block: the upload of the step before
  // the previous one must have completed (the engine waits for a step's
  // tokens before it packs the step after the next).
  void begin();
  // Appends `values` and returns their (device-side) view with `dims`.
  Tensor add_i32(std::span<const int32_t> values, std::initializer_list<int64_t> dims);
  Tensor add_i64(std::span<const int64_t> values, std::initializer_list<int64_t> dims);
  // Queues the one copy of this step's bytes (CPU backend: nothing to do).
  void upload();
  size_t used() const { return used_; }
  // This step's packed bytes as i32 words: where they were packed (pinned
  // host) and where the ops read them (the device mirror; CUDA only), for
  // ops::step_in, which moves them inside a decode graph instead of upload().
  Tensor packed_host() const;
  Tensor packed_device() const;
  int64_t capacity_words() const { return int64_t(capacity_ / 4); }

  // The capacity for a step of at most `tokens` new positions, `seqs`
  // sequences with block tables of `max_blocks` entries, `copies` block
  // copies and `rows` sampled rows (the arrays the engine adds).
  static size_t capacity_for(int64_t tokens, int64_t seqs, int64_t max_blocks, int64_t copies, int64_t rows);

 private:
  Tensor add(const void* values, size_t bytes, DType dtype, std::initializer_list<int64_t> dims);

  ops::Ctx ctx_;
  bool on_device_ = false;
  size_t capacity_ = 0;
  Arena host_;
  Arena device_;  // empty on the CPU backend
  char* host_blocks_[2] = {nullptr, nullptr};
  char* device_block_ = nullptr;
  int current_ = 1;             // begin() moves to the other block
  char* host_block_ = nullptr;  // host_blocks_[current_]
  char* view_block_ = nullptr;  // where the ops read: host_block_ or the device block
  size_t used_ = 0;
};

}  // namespace dapo::rollout
