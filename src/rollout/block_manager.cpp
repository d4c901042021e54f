// Block pool with reference counts: allocation from a stack of free ids
// (lowest ids first, so runs are reproducible and easy to read in a
// debugger), copy-on-write and table sharing.
#include "dapo/rollout/block_manager.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::rollout {

std::vector<size_t> copy_groups(std::span<const BlockCopy> copies) {
  std::vector<size_t> ends;
  std::vector<int32_t> read, written;  // by the current group
  for (size_t i = 0; i < copies.size(); ++i) {
    const BlockCopy& c = copies[i];
    auto has = [](const std::vector<int32_t>& v, int32_t b) { return std::find(v.begin(), v.end(), b) != v.end(); };
    if (has(read, c.dst) || has(written, c.dst) || has(written, c.src)) {
      ends.push_back(i);
      read.clear();
      written.clear();
    }
    read.push_back(c.src);
    written.push_back(c.dst);
  }
  if (!copies.empty()) ends.push_back(copies.size());
  return ends;
}

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size) : block_size_(block_size) {
  DAPO_CHECK(num_blocks >= 1 && block_size >= 1, "BlockManager of ", num_blocks, " blocks of ", block_size,
             " positions");
  DAPO_CHECK(num_blocks <= INT32_MAX, "BlockManager: ", num_blocks, " blocks do not fit i32 block ids");
  ref_counts_.assign(size_t(num_blocks), 0);
  free_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

int32_t BlockManager::ref_count(int32_t block) const {
  DAPO_CHECK(block >= 0 && block < num_blocks(), "block ", block, " outside [0, ", num_blocks(), ")");
  return ref_counts_[size_t(block)];
}

int64_t BlockManager::blocks_needed(const BlockTable& table, int64_t begin, int64_t end) const {
  DAPO_CHECK(begin >= 0 && begin <= end, "positions [", begin, ", ", end, ")");
  DAPO_CHECK(int64_t(table.size()) >= blocks_for(begin), "a table of ", table.size(), " blocks does not cover the ",
             begin, " positions before the write");
  if (begin == end) return 0;
  const int64_t first = begin / block_size_, last = (end - 1) / block_size_;
  int64_t need = std::max<int64_t>(0, last + 1 - int64_t(table.size()));
  for (int64_t j = first; j <= last && j < int64_t(table.size()); ++j)
    if (ref_counts_[size_t(table[size_t(j)])] > 1) ++need;
  return need;
}

int64_t BlockManager::writable_positions(const BlockTable& table, int64_t begin, int64_t max_count) const {
  // blocks_needed grows with the end of the range: bisect on it.
  int64_t lo = 0, hi = max_count;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (blocks_needed(table, begin, begin + mid) <= num_free())
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

bool BlockManager::prepare_write(BlockTable& table, int64_t begin, int64_t end, std::vector<BlockCopy>& copies) {
  if (blocks_needed(table, begin, end) > num_free()) return false;
  if (begin == end) return true;
  const int64_t first = begin / block_size_, last = (end - 1) / block_size_;
  for (int64_t j = first; j <= last && j < int64_t(table.size()); ++j) {
    int32_t& block = table[size_t(j)];
    if (ref_counts_[size_t(block)] <= 1) continue;
    const int32_t copy = allocate();
    copies.push_back({block, copy});
    release(block);
    block = copy;
  }
  while (int64_t(table.size()) <= last) table.push_back(allocate());
  return true;
}

BlockTable BlockManager::fork(const BlockTable& parent) {
  for (const int32_t b : parent) {
    DAPO_CHECK(ref_count(b) > 0, "fork of a table holding free block ", b);
    ++ref_counts_[size_t(b)];
  }
  return parent;
}

void BlockManager::free(BlockTable& table) {
  for (const int32_t b : table) release(b);
  table.clear();
}

void BlockManager::truncate(BlockTable& table, int64_t positions) {
  const size_t keep = size_t(std::max<int64_t>(0, blocks_for(positions)));
  while (table.size() > keep) {
    release(table.back());
    table.pop_back();
  }
}

int32_t BlockManager::allocate() {
  DAPO_CHECK(!free_.empty(), "BlockManager: allocate() with no free block (callers check blocks_needed)");
  const int32_t b = free_.back();
  free_.pop_back();
  ref_counts_[size_t(b)] = 1;
  peak_used_ = std::max(peak_used_, num_used());
  return b;
}

void BlockManager::release(int32_t block) {
  DAPO_CHECK(ref_count(block) > 0, "release of free block ", block);
  if (--ref_counts_[size_t(block)] == 0) free_.push_back(block);
}

}  // namespace dapo::rollout
