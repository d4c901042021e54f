// The buffers of one engine step: its rows on the device (logits, samples),
// its metadata as the host builds it, and that metadata's staged views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dapo/core/carver.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/context.h"
#include "dapo/rollout/scheduler.h"
#include "decode_graphs.h"
#include "step_staging.h"

namespace dapo::rollout {

// The per-step rows of generate(), on the backend's device: the logits of
// the step in this rank's vocabulary shard (B, V / tp), and the sampled tokens (R) i32 followed by their
// log-probs (R) f32 in one block (`sampled`, 2 * max_seqs words), so that
// one copy brings both back to the host. B and R are at most max_seqs.
// Carved from c's arena, or only counted when c has none: generate() sizes
// its arena by counting.
struct StepRows {
  float* logits;
  int32_t* sampled;
};

StepRows carve_step_rows(Carver& c, int64_t max_seqs, int64_t V);

// The step's metadata for forward_cached, rebuilt on the host every step,
// then packed into the staging block (one upload per step).
struct StepBuffers {
  PaddedDecode arrays;  // the forward's arrays (unpadded)
  std::vector<int32_t>& tokens = arrays.tokens;
  std::vector<int32_t>& positions = arrays.positions;
  std::vector<int32_t>& cu_seqlens_q = arrays.cu_seqlens_q;
  std::vector<int32_t>& last_rows = arrays.last_rows;
  std::vector<int32_t>& slot_mapping = arrays.slot_mapping;
  std::vector<int32_t>& block_table = arrays.block_table;
  std::vector<int32_t>& context_lens = arrays.context_lens;
  std::vector<int32_t> copy_src, copy_dst, logit_rows;
  std::vector<int64_t> streams, counters;
  std::vector<size_t> copy_ends;  // copy_groups(plan.copies)
  int64_t max_blocks = 0, max_context_len = 0;
  int64_t fresh_max_seqlen = 0;   // > 0: every chunk starts at position 0 (model::CachedBatch)
  bool rows_are_chunks = true;    // row r samples from logits row r, for every r

  // fed: a plan made ahead (Scheduler::plan_ahead), whose input tokens are
  // not known on the host yet; their slots hold 0 until the engine copies
  // them in on the device.
  void build(const StepPlan& plan, const Scheduler& sched, int64_t block_size, std::span<const uint64_t> uids,
             uint64_t step, bool fed);
};

// The staged views of one step.
struct StepViews {
  model::CachedBatch batch;
  Tensor copy_src, copy_dst, logit_rows, streams, counters;
};

// The forward's arrays first, then the sampled rows' keys: for a padded
// decode step their sizes, and so their device addresses, are the same at
// every replay of its graph. `rows` >= R: the keys are padded with zeros to
// that many rows (a decode graph samples its padding rows too). Packs only:
// the caller uploads (StepStaging::upload) or a graph's step_in moves them.
StepViews stage(StepStaging& staging, const PaddedDecode& a, int64_t width, int64_t max_context_len, StepBuffers& s,
                int64_t rows);

// The step's copy-on-writes, in order, group by group (copy_groups): the
// copies of one group are independent, later groups may read their blocks.
void run_copies(const ops::Ctx& ctx, const model::KvCache& cache, const StepBuffers& s, const StepViews& v);

}  // namespace dapo::rollout
