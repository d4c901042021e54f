// The split of CUDA paged attention, planned on the host (paged_attention_plan.h).
#include "dapo/ops/plan/paged_attention_plan.h"

#include <algorithm>
#include <cmath>

#include "dapo/core/arena.h"

namespace dapo::ops::plan {

int64_t paged_default_stages(int64_t N, int64_t B, int64_t D) { return N == B && (D == 64 || D == 128) ? 3 : 0; }

PagedPlan paged_plan_of(int64_t N, int64_t Hq, int64_t D, int64_t max_ctx, const PagedSplit& sp) {
  PagedPlan p;
  p.csize = sp.cluster;
  p.qsplit = sp.qsplit;
  p.pdl = sp.pdl;
  p.stages = sp.stages;
  const int64_t unit = paged_unit(D), max_units = (max_ctx + unit - 1) / unit;
  const int64_t ctas = std::min(std::max<int64_t>(sp.groups, 1) * p.csize, max_units);
  p.part_len = (max_units + ctas - 1) / ctas * unit;
  p.groups = (max_ctx + p.part_len * p.csize - 1) / (p.part_len * p.csize);
  if (p.groups > 1) {
    const size_t pr = size_t(N * Hq) * size_t(p.groups);
    p.scratch = (pr * 2 + pr * size_t(D)) * sizeof(float) + 3 * Arena::kAlign;
  }
  return p;
}

// The time model: waves of CTAs over the device's CTA slots, the CTAs of a
// wave sharing a bandwidth that saturates with their number (one CTA alone
// is latency bound: a few KB in flight per warp), a fixed cost per CTA,
// plus the merge kernel's launch and partial traffic when there are several
// merge groups, or the cluster's merge.
PagedSplit paged_choose_split(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_ctx,
                              int64_t resident) {
  // Refitted for the shared-memory decode kernel (3 stages, 2 CTAs per SM)
  // to forced-split sweeps on an H100 SXM (3.0 TB/s copy): the three
  // Qwen2.5 shapes, batch 64-256 at 256-2048 positions and batch 8-128 at
  // 4k-32k (`bench_ops_gpu --op paged_attention --sweep`); the pick is within 3.4% of the
  // best swept split everywhere.
  // The register kernel (prefill, D 16 and 32) keeps its earlier fit (same
  // sweeps: 1.5e4 bytes/us alone, 3 us of merge).
  const bool smem = paged_default_stages(N, B, D) > 0;
  constexpr double kBandwidth = 3.0e6;  // bytes per microsecond
  const double kCtaRate = smem ? 2.0e4 : 1.5e4;  // bytes per microsecond one CTA reaches alone
  constexpr double kCtaBytes = 1.28e5;  // a CTA's fixed cost, in streamed bytes
  constexpr double kWaveUs = 1.0;
  const double kMergeUs = smem ? 1.0 : 3.0;  // the merge kernel, besides its partial traffic
  constexpr double kClusterUs = 0.5;    // per CTA of a cluster's merge in distributed shared memory
  PagedSplit best_split;
  const int64_t group = Hq / Hkv, rows = N * Hq;
  // Query tiles of one sequence over several CTAs: decode batches (one row
  // tile per sequence when every sequence has one token) use one.
  const int64_t tiles = (std::min(N, max_ctx) * group + kPagedRowsPerTile - 1) / kPagedRowsPerTile;
  best_split.qsplit = N == B ? 1 : std::clamp<int64_t>(tiles, 1, 64);
  best_split.stages = paged_default_stages(N, B, D);
  const int64_t items = B * Hkv * best_split.qsplit;
  // The tail of a generation round, a few long sequences: with at most 4
  // (sequence, KV head) items the time model below picks many plain CTAs
  // and the merge kernel, where an H100 sweep (the tail part of
  // bench_ops_gpu --op paged_attention --sweep: B 1-4 at 4k-20k positions, the three
  // Qwen2.5 shapes) measured 4 clusters of 8 CTAs per item 1.07-2.0x faster
  // (median 1.3x; 1.5B, one sequence at 8,192: 664 against 427 GB/s) and
  // within 4% of the best swept split in every case with at most 4 items.
  // From 5 to 16 items one cluster of 8 per item, merged in distributed
  // shared memory with no merge kernel: in the decode graph (H100,
  // bench_decode_step_gpu at 4,096 positions) the whole step ran 2.7-9.7%
  // faster than with the time model's pick (1.5B batch 4: 2.100 ms against
  // 2.159, batch 8: 2.260 against 2.362; 0.5B batch 4: 1.095 against
  // 1.213), and slower at 32 items (1.5B batch 16, 2,048 positions: 2.483
  // against 2.370) and with one item or two (1.5B batch 1: 2.015 against
  // 1.992 with 4 x 8).
  // From 8,192 positions on, 5 to 16 items take 16 plain CTAs each and the
  // merge kernel instead: an H200 sweep (2026-11-29, the tail part, B 1-4 at
  // 4k-20k, the three Qwen2.5 shapes) measured one cluster of 8 per item
  // 1.07-1.11x slower than that at 8,192 (1.5B, 4 sequences: 19.7 against
  // 17.8 us) and 1.18-1.40x at 20,480 (1.5B, 4 sequences: 42.2 against 30.1;
  // 7B, 2: 42.1 against 30.9), and within 1% of the best split at 4,096.
  if (N == B && best_split.stages == 3 && max_ctx >= 4096 && items <= 16) {
    const bool long_many = items > 4 && max_ctx >= 8192;
    best_split.groups = long_many ? 16 : items <= 4 ? 4 : 1;
    best_split.cluster = long_many ? 1 : 8;
    return best_split;
  }
  const double key_bytes = 4.0 * double(D);  // K and V of one key of one KV head
  auto time_of = [&](const PagedPlan& p) {
    const int64_t ctas = items * p.groups * p.csize, full = ctas / resident, rest = ctas % resident;
    const double cta_bytes = double(p.part_len) * key_bytes + kCtaBytes;
    auto wave = [&](int64_t n) {
      return double(n) * cta_bytes / (kBandwidth * -std::expm1(-double(n) * kCtaRate / kBandwidth)) + kWaveUs;
    };
    double time = double(full) * wave(resident);
    if (rest > 0) time += wave(rest);
    if (p.groups > 1) time += kMergeUs + 2.0 * double(p.scratch) / kBandwidth;
    if (p.csize > 1) time += kClusterUs * double(p.csize);
    return time;
  };
  // Candidate group counts: 1..16, then steps of 1/8, and those that fill
  // 1..4 waves of CTA slots exactly; clusters of 1..8 CTAs for decode.
  int64_t cand[96];
  int nc = 0;
  for (int64_t p = 1; p <= 16; ++p) cand[nc++] = p;
  for (int64_t p = 18; nc < 88; p += p / 8) cand[nc++] = p;
  for (int64_t w = 1; w <= 4; ++w) cand[nc++] = std::max<int64_t>(1, w * resident / items);
  double best = 0.0;
  int64_t best_ctas = 0;
  for (const int64_t cs : {int64_t(1), int64_t(2), int64_t(4), int64_t(8)}) {
    if (cs > 1 && N != B) break;  // prefill: plain CTAs
    for (int c = 0; c < nc; ++c) {
      PagedSplit sp = best_split;
      sp.groups = std::max<int64_t>(1, cand[c] / cs);
      sp.cluster = cs;
      const PagedPlan p = paged_plan_of(N, Hq, D, max_ctx, sp);
      if (p.groups > 1 && size_t(rows) * size_t(p.groups) * size_t(D + 2) * 4 > size_t(kPagedMaxPartialBytes)) continue;
      const double time = time_of(p);
      const int64_t ctas = p.groups * p.csize;
      if (best_ctas == 0 || time < best || (time == best && ctas < best_ctas)) {
        best = time;
        best_ctas = ctas;
        sp.groups = p.groups;
        best_split = sp;
      }
    }
  }
  return best_split;
}

}  // namespace dapo::ops::plan
