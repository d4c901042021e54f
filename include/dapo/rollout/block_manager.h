// The host side of the paged KV cache (ops/kv_cache.h): which physical
// blocks are free, how many block tables reference each block, and the
// table operations the generation engine needs - grow a table, share all of
// a table's blocks with a new one (the n samples of a prompt after its
// single prefill), copy-on-write a shared block before it is written, and
// free a table. The same bookkeeping serves the CPU and the CUDA backends:
// it only hands out block ids; the engine passes them to the ops.
//
// Running out of blocks is never an error here: prepare_write() reports
// that it could not get enough blocks and changes nothing, and the caller
// (the scheduler) decides to wait, shrink a prefill chunk or preempt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dapo::rollout {

// A sequence's physical blocks in logical order: position p of the sequence
// lives in block table[p / block_size] at offset p % block_size.
using BlockTable = std::vector<int32_t>;

// One copy-on-write: block `dst` must become a copy of block `src` (both
// pools, every layer) before the step's forward writes into `dst`.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

// Copies made in one step must run in their order: a block freed by a
// preemption may be read by an early copy and written by a later one. This
// splits them into consecutive groups that each run as one (parallel)
// ops::kv_block_copy - within a group no block is written twice, nor both
// written and read - and returns the end index of each group.
std::vector<size_t> copy_groups(std::span<const BlockCopy> copies);

class BlockManager {
 public:
  // A pool of num_blocks blocks of block_size positions each, all free.
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return int64_t(ref_counts_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_free() const { return int64_t(free_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }
  int64_t peak_used() const { return peak_used_; }
  // How many tables reference `block` (0: free).
  int32_t ref_count(int32_t block) const;
  // Blocks that hold `positions` positions: ceil(positions / block_size).
  int64_t blocks_for(int64_t positions) const { return (positions + block_size_ - 1) / block_size_; }

  // Blocks prepare_write(table, begin, end) would take from the pool: one
  // per block the range reaches past the end of the table, plus one per
  // shared block of the table the range writes into (copy-on-write).
  // `table` must already cover positions [0, begin).
  int64_t blocks_needed(const BlockTable& table, int64_t begin, int64_t end) const;
  // The largest count in [0, max_count] such that positions
  // [begin, begin + count) can be made writable with the free blocks.
  int64_t writable_positions(const BlockTable& table, int64_t begin, int64_t max_count) const;

  // Makes positions [begin, end) of `table` writable by this sequence
  // alone: each shared block of the range is replaced by a fresh copy (the
  // copy is appended to `copies`; the old block loses one reference) and
  // blocks are appended until the table covers `end` positions. Returns
  // false, changing nothing, when the pool has fewer than
  // blocks_needed(table, begin, end) free blocks.
  bool prepare_write(BlockTable& table, int64_t begin, int64_t end, std::vector<BlockCopy>& copies);

  // A new table that shares every block of `parent` (one more reference each).
  BlockTable fork(const BlockTable& parent);

  // Drops the table's reference to each of its blocks (a block whose count
  // reaches 0 is free again) and clears the table.
  void free(BlockTable& table);
  // Drops the table's blocks past the first blocks_for(positions) (the
  // blocks of rejected speculative positions).
  void truncate(BlockTable& table, int64_t positions);

 private:
  int32_t allocate();
  void release(int32_t block);

  int64_t block_size_ = 0;
  std::vector<int32_t> ref_counts_;  // (num_blocks)
  std::vector<int32_t> free_;        // free block ids; the next one handed out is free_.back()
  int64_t peak_used_ = 0;
};

}  // namespace dapo::rollout
