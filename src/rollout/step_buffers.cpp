// The host side of an engine step's metadata: built from the scheduler's
// plan, packed into the staging block, and the copy-on-writes it lists.
#include "step_buffers.h"

#include <algorithm>

#include "dapo/core/error.h"
#include "dapo/ops/kv_copy.h"
#include "dapo/rollout/engine.h"

namespace dapo::rollout {

StepRows carve_step_rows(Carver& c, int64_t max_seqs, int64_t V) {
  StepRows r;
  r.logits = c.alloc_array<float>(size_t(max_seqs * V));
  r.sampled = c.alloc_array<int32_t>(size_t(2 * max_seqs));
  return r;
}

void StepBuffers::build(const StepPlan& plan, const Scheduler& sched, int64_t block_size,
                        std::span<const uint64_t> uids, uint64_t step, bool fed) {
  tokens.clear();
  positions.clear();
  slot_mapping.clear();
  last_rows.clear();
  context_lens.clear();
  cu_seqlens_q.assign(1, 0);
  max_blocks = 1;
  max_context_len = 1;
  fresh_max_seqlen = 0;
  bool fresh = true;
  for (const ScheduledChunk& c : plan.chunks) {
    max_blocks = std::max<int64_t>(max_blocks, int64_t(sched.table(c.seq).size()));
    fresh = fresh && c.begin == 0;
    fresh_max_seqlen = std::max(fresh_max_seqlen, c.count);
  }
  if (!fresh) fresh_max_seqlen = 0;
  block_table.assign(plan.chunks.size() * size_t(max_blocks), 0);
  for (size_t b = 0; b < plan.chunks.size(); ++b) {
    const ScheduledChunk& c = plan.chunks[b];
    const BlockTable& table = sched.table(c.seq);
    for (int64_t p = c.begin; p < c.begin + c.count; ++p) {
      tokens.push_back(fed ? 0 : c.draft >= 0 ? c.draft : sched.token_at(c.seq, p));
      positions.push_back(int32_t(p));
      slot_mapping.push_back(int32_t(table[size_t(p / block_size)] * block_size + p % block_size));
    }
    cu_seqlens_q.push_back(int32_t(tokens.size()));
    last_rows.push_back(int32_t(tokens.size()) - 1);
    context_lens.push_back(int32_t(c.begin + c.count));
    max_context_len = std::max(max_context_len, c.begin + c.count);
    std::copy(table.begin(), table.end(), block_table.begin() + std::ptrdiff_t(b * size_t(max_blocks)));
  }
  copy_src.clear();
  copy_dst.clear();
  for (const BlockCopy& c : plan.copies) {
    copy_src.push_back(c.src);
    copy_dst.push_back(c.dst);
  }
  copy_ends = copy_groups(plan.copies);
  logit_rows.clear();
  streams.clear();
  counters.clear();
  rows_are_chunks = plan.rows.size() == plan.chunks.size();
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    const SampleRow& row = plan.rows[r];
    logit_rows.push_back(int32_t(row.chunk));
    rows_are_chunks = rows_are_chunks && row.chunk == int64_t(r);
    streams.push_back(int64_t(sample_stream(step, uids[size_t(row.prompt)], row.sample)));
    counters.push_back(row.position);
  }
}

StepViews stage(StepStaging& staging, const PaddedDecode& a, int64_t width, int64_t max_context_len, StepBuffers& s,
                int64_t rows) {
  const int64_t N = int64_t(a.tokens.size()), B = int64_t(a.last_rows.size());
  const int64_t M = int64_t(s.copy_src.size()), R = int64_t(s.logit_rows.size());
  DAPO_CHECK(rows >= R, "stage: ", R, " sampled rows padded to ", rows);
  s.streams.resize(size_t(rows), 0);
  s.counters.resize(size_t(rows), 0);
  staging.begin();
  StepViews v;
  v.batch.tokens = staging.add_i32(a.tokens, {N});
  v.batch.positions = staging.add_i32(a.positions, {N});
  v.batch.cu_seqlens_q = staging.add_i32(a.cu_seqlens_q, {B + 1});
  v.batch.last_rows = staging.add_i32(a.last_rows, {B});
  v.batch.slot_mapping = staging.add_i32(a.slot_mapping, {N});
  v.batch.block_table = staging.add_i32(a.block_table, {B, width});
  v.batch.context_lens = staging.add_i32(a.context_lens, {B});
  v.batch.max_context_len = max_context_len;
  v.streams = staging.add_i64(s.streams, {rows});
  v.counters = staging.add_i64(s.counters, {rows});
  v.logit_rows = staging.add_i32(s.logit_rows, {R});
  v.copy_src = staging.add_i32(s.copy_src, {M});
  v.copy_dst = staging.add_i32(s.copy_dst, {M});
  return v;
}

void run_copies(const ops::Ctx& ctx, const model::KvCache& cache, const StepBuffers& s, const StepViews& v) {
  size_t begin = 0;
  for (const size_t end : s.copy_ends) {
    const int64_t m = int64_t(end - begin);
    const Tensor src(static_cast<int32_t*>(v.copy_src.data) + begin, DType::i32, {m}, v.copy_src.device);
    const Tensor dst(static_cast<int32_t*>(v.copy_dst.data) + begin, DType::i32, {m}, v.copy_dst.device);
    for (size_t l = 0; l < cache.k.size(); ++l) ops::kv_block_copy(ctx, cache.k[l], cache.v[l], src, dst);
    begin = end;
  }
}

}  // namespace dapo::rollout
