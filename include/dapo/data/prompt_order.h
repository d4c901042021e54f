// The order in which prompts are taken: one shuffle per epoch, a pure
// function of (seed, epoch), and a cursor of plain integers that the
// checkpoint stores, so that a resumed run takes exactly the prompts an
// uninterrupted run would have taken, on every rank and every machine.
//
// The shuffle is Fisher-Yates (Durstenfeld's in-place form) driven by
// Philox4x32-10 (core/rng.h): key = seed, stream = stream_id({kPromptOrderTag,
// epoch}), counter = the index of the 128-bit draw. Bounded integers come
// from Lemire's multiply-shift with rejection, so every permutation is
// equally likely and no floating point is involved. Part of the checkpoint
// format: changing any of this changes what a resumed run trains on.
//
// Sharding a batch over dp ranks is the trainer's job: every rank computes
// the same batch here and takes its share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dapo::data {

// "promptor" in ASCII: keeps the order's Philox streams apart from the
// sampler's (step, prompt uid, sample) streams under the same seed.
inline constexpr uint64_t kPromptOrderTag = 0x70726F6D70746F72ull;

// Where the next prompt comes from: position `position` (0 <= position < size)
// of the permutation of epoch `epoch`. (e, 0) with e > 0 means epoch e - 1
// is complete.
struct PromptCursor {
  int64_t epoch = 0;
  int64_t position = 0;
  bool operator==(const PromptCursor&) const = default;
};

// What the checkpoint stores (docs/DESIGN.md section 4, /data): the cursor and
// what it is only meaningful with, the seed and the number of prompts.
struct PromptOrderState {
  uint64_t seed = 0;
  int64_t size = 0;
  PromptCursor cursor;
  bool operator==(const PromptOrderState&) const = default;
};

class PromptOrder {
 public:
  // `size` prompts (> 0: an empty dataset is the loader's error to report).
  PromptOrder(int64_t size, uint64_t seed);

  // The permutation of 0..size-1 used in `epoch` (>= 0).
  static std::vector<int64_t> permutation(int64_t size, uint64_t seed, int64_t epoch);

  // The next `n` (>= 0) record indices, advancing the cursor; a batch that
  // runs past the end of an epoch continues with the next epoch's
  // permutation (and may hold a record twice when n > size).
  std::vector<int64_t> next_batch(int64_t n);

  const PromptCursor& cursor() const { return cursor_; }
  int64_t size() const { return size_; }
  uint64_t seed() const { return seed_; }

  PromptOrderState state() const { return {seed_, size_, cursor_}; }
  // Continues from a saved state. Throws UserError, naming `origin` (the
  // checkpoint), when the state is out of range or was saved with another
  // seed or another number of prompts: resuming would repeat or skip prompts.
  void restore(const PromptOrderState& state, const std::string& origin);

 private:
  void load_epoch(int64_t epoch);

  int64_t size_;
  uint64_t seed_;
  PromptCursor cursor_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;  // the permutation of cached_epoch_
};

}  // namespace dapo::data
