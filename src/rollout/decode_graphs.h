// CUDA graphs for the engine's pure decode steps (one new token for every
// sequence), keyed by a bucketed batch size and a bucketed context length.
// A step is padded up to its bucket so that everything a kernel's launch
// depends on (row counts, the block-table width, max_context_len) is the
// bucket's, and only device-resident metadata changes between replays.
// Padding rows are well defined: token 0 at position 0, nothing written to
// the cache (slot -1), one cached position read from a reserved all-zero
// pad block, so their activations stay finite and are never sampled.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "dapo/ops/cuda_graph.h"

namespace dapo::rollout {

// Batch-size buckets: powers of two up to 32, then multiples of 32, capped
// at max_seqs. Context buckets: powers of two from 256, capped at max_len.
int64_t batch_bucket(int64_t B, int64_t max_seqs);
int64_t context_bucket(int64_t context, int64_t max_len);

// The metadata of a decode step padded to (Bp sequences, table width W);
// the arrays the engine stages for forward_cached.
struct PaddedDecode {
  std::vector<int32_t> tokens, positions, cu_seqlens_q, last_rows, slot_mapping, block_table, context_lens;
};
// B = context_lens.size() real sequences with tables of `width` entries
// (row-major, B x width) become Bp >= B sequences with tables of W >=
// width entries; new entries and rows point at pad_block.
void pad_decode(PaddedDecode& out, const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                const std::vector<int32_t>& slot_mapping, const std::vector<int32_t>& block_table, int64_t width,
                const std::vector<int32_t>& context_lens, int64_t Bp, int64_t W, int32_t pad_block);

class DecodeGraphs {
 public:
  // A bucket's first kPadSteps steps without a graph of their own replay
  // the smallest captured graph of the same context bucket with more rows,
  // padded up to its rows, before one is captured: a capture (~1.8 ms at
  // 0.5B on an H100) costs more than a few steps with extra padding rows,
  // and a fixed-length load ends with buckets that last 1-2 steps (the
  // prompts prefilled in the last chunks finish last). Buckets that last
  // (a draining batch) get their own graph on their (kPadSteps + 1)-th step.
  static constexpr int64_t kPadSteps = 3;
  struct Pick {
    ops::CapturedGraph* graph = nullptr;  // nullptr: capture one for (rows, Cp)
    int64_t rows = 0;                     // what the step is padded to: Bp, or the larger graph's
  };
  // The graph a step of bucket (Bp, Cp) replays; counts the step.
  Pick pick(int64_t Bp, int64_t Cp);
  ops::CapturedGraph& add(int64_t Bp, int64_t Cp, ops::CapturedGraph graph);
  bool has(int64_t Bp, int64_t Cp) const { return graphs_.count({Bp, Cp}) > 0; }
  int64_t size() const { return int64_t(graphs_.size()); }
  int64_t padded_steps() const { return padded_steps_; }  // steps replayed on a larger bucket's graph

 private:
  std::map<std::pair<int64_t, int64_t>, ops::CapturedGraph> graphs_;
  std::map<std::pair<int64_t, int64_t>, int64_t> steps_;  // steps seen per bucket
  int64_t padded_steps_ = 0;
};

}  // namespace dapo::rollout
