// CUDA token sampling (include/dapo/ops/sampling.h): the CPU op's rules and
// Philox draw, one CTA per sampled row, no sort.
//
// Top-k and top-p find their cut by the radix descent of sampling_select.h:
// a histogram per level (8 key bits) in shared memory with 32-bit integer
// atomics only (counts and exact significand sums, so the bits do not
// depend on the order the atomics land in); one warp picks the bin with the
// host's arithmetic. Level 0 (the exponent) reads the whole row; then the
// tokens with a weight in the chosen bin or above are compacted, in id
// order, into shared memory when at most kCap of them (one more pass), and
// the other levels, the tie cut, top-p inside top-k and the walk run there.
// Otherwise levels 1-3 re-read the row but skip, before the exp, every token
// whose z - m is out of the bin's range. The descent stops early when the
// chosen bin holds one token. Ties at the threshold are cut in id order by
// a block scan; the draw walks the kept set in id order with a block-wide
// prefix sum in double, chunk by chunk. w is recomputed from the logits in
// every row pass instead of being stored (no global scratch).
//
// Without top-k or top-p (untruncated_kernel) one pass folds each warp's
// contiguous id range into (max, sum of exp); the draw picks its range from
// those and only that range is walked. With scratch for the ranges' sums,
// the pass runs over 8 CTAs a row (untruncated_parts_kernel) and the choice
// and the walk in a second kernel: the same ranges and sums, so the same
// bits, with a row's reads spread over 8 SMs.
//
// The same block-level pieces make the per-shard ops of tp sampling (one
// CTA per row each, no compaction), so a shard makes the same decisions.
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common.cuh"
#include "ptx/pdl.cuh"
#include "dapo/core/rng.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/sampling_select.h"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using namespace ops::detail;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 8;  // contiguous ids per thread in an id-order chunk
constexpr int kChunk = kThreads * kPerThread;

struct Smem {
  // The histogram as it accumulates: 32-bit shared atomics (native; the
  // 64-bit ones are not), the 24-bit significand split in two 12-bit
  // halves so that no per-bin sum overflows for V <= 2^20.
  uint32_t bin_n[kMaxBins];
  uint32_t bin_hi[kMaxBins];
  uint32_t bin_lo[kMaxBins];
  int64_t count[kMaxBins];  // ... and as descend reads it
  int64_t units[kMaxBins];
  double scan[kWarps];
  int32_t iscan[kWarps];
  Select sel;
  int32_t found;
  int32_t last;
  int32_t imin;
  // The one-pass path without truncation: each warp's id range (its part)
  // as (max z, sum of exp(z - max)), then the row's m, total and the part
  // the draw falls in.
  float part_max[kWarps];
  double part_sum[kWarps];
  float row_m;
  int32_t walk_part;
  double row_total;
  double walk_target;
  double walk_before;
};

// z and w exactly as the CPU op rounds them: no fused multiply-add.
__device__ __forceinline__ float dz_of(float x, float inv_t, float m) { return __fsub_rn(__fmul_rn(x, inv_t), m); }

// A bound on d = z - m below which expf(d) is certainly under the weight
// with bits key (a margin of 1e-3 in log space covers the few-ulp errors of
// expf and logf), and one above which it is certainly over: passes that
// look at a key range skip the exp for the rest of the row. Only a
// shortcut: every decision is made on the exact key.
__device__ __forceinline__ float skip_below(uint32_t key) {
  const float w = __uint_as_float(key);
  return w > 0.0f ? logf(w) - 1e-3f : -INFINITY;
}
__device__ __forceinline__ float skip_above(uint32_t key) {
  const float w = __uint_as_float(key);
  return w < 1.0f ? logf(w) + 1e-3f : INFINITY;
}

__device__ __forceinline__ void unpack(uint4 q, float (&x)[4]) {
  x[0] = __uint_as_float(q.x);
  x[1] = __uint_as_float(q.y);
  x[2] = __uint_as_float(q.z);
  x[3] = __uint_as_float(q.w);
}
__device__ __forceinline__ void unpack(uint4 q, float (&x)[8]) {
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(u[i] << 16);
    x[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

// f(v, x) for every id of the row, x the logit as fp32: 128-bit loads when
// the row is aligned, each thread visiting its ids in increasing order.
template <class T, class F>
__device__ __forceinline__ void visit_row(const T* row, int32_t V, F&& f) {
  constexpr int kVec = 16 / int(sizeof(T));
  int32_t done = 0;
  if (aligned16(row)) {
    const int32_t nvec = V / kVec;
    const uint4* p = reinterpret_cast<const uint4*>(row);
    for (int32_t i = threadIdx.x; i < nvec; i += kThreads) {
      float x[kVec];
      unpack(p[i], x);
#pragma unroll
      for (int j = 0; j < kVec; ++j) f(i * kVec + j, x[j]);
    }
    done = nvec * kVec;
  }
  for (int32_t v = done + int32_t(threadIdx.x); v < V; v += kThreads) f(v, load_f32(row, v));
}

// x[0..8) = row[v0 .. v0+8), -inf past V.
template <class T>
__device__ __forceinline__ void load8(const T* row, int32_t V, int32_t v0, float (&x)[kPerThread]) {
  if (v0 + kPerThread <= V && aligned16(row + v0)) {
    const uint4* p = reinterpret_cast<const uint4*>(row + v0);
    if constexpr (sizeof(T) == 4) {
      float a[4], b[4];
      unpack(p[0], a);
      unpack(p[1], b);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[j] = a[j];
        x[4 + j] = b[j];
      }
    } else {
      unpack(p[0], x);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) x[j] = v0 + j < V ? load_f32(row, v0 + j) : -INFINITY;
}

// Fixed-order block reductions: warp butterflies, then every thread adds the
// warps' partials in warp order (the same bits in every thread).
__device__ double block_sum(double v, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) sm.scan[threadIdx.x >> 5] = v;
  __syncthreads();
  double s = 0;
  for (int w = 0; w < kWarps; ++w) s += sm.scan[w];
  __syncthreads();
  return s;
}
__device__ int64_t block_sum(int64_t v, Smem& sm) {
  return int64_t(block_sum(double(v), sm));  // counts < 2^53: exact
}
__device__ float block_max(float v, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) sm.scan[threadIdx.x >> 5] = double(v);
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, float(sm.scan[w]));
  __syncthreads();
  return m;
}

// Exclusive prefix over the block in thread order; `total` gets the sum.
__device__ double block_exclusive_scan(double v, Smem& sm, double& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0;
  if (lane == 31) sm.scan[warp] = incl;
  __syncthreads();
  double off = 0, tot = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) off = tot;
    tot += sm.scan[w];
  }
  __syncthreads();
  total = tot;
  return off + excl;
}
__device__ int32_t block_exclusive_scan(int32_t v, Smem& sm, int32_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) sm.iscan[warp] = incl;
  __syncthreads();
  int32_t off = 0, tot = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) off = tot;
    tot += sm.iscan[w];
  }
  __syncthreads();
  total = tot;
  return off + incl - v;
}

// Max of the raw logits.
template <class T>
__device__ float row_max(const T* row, int32_t V, Smem& sm) {
  float mx = -INFINITY;
  visit_row(row, V, [&](int32_t, float x) { mx = fmaxf(mx, x); });
  return block_max(mx, sm);
}

// Sum of w over the row (no truncation).
template <class T>
__device__ double row_sum_w(const T* row, int32_t V, float inv_t, float m, Smem& sm) {
  double s = 0;
  visit_row(row, V, [&](int32_t, float x) { s += double(expf(dz_of(x, inv_t, m))); });
  return block_sum(s, sm);
}

// Greedy: sum of exp(x - mx) in double, as the CPU op.
template <class T>
__device__ double row_sum_greedy(const T* row, int32_t V, float mx, Smem& sm) {
  double s = 0;
  visit_row(row, V, [&](int32_t, float x) { s += exp(double(x) - double(mx)); });
  return block_sum(s, sm);
}

// The lowest id with x == mx (INT_MAX if none).
template <class T>
__device__ int32_t row_first_equal(const T* row, int32_t V, float mx, Smem& sm) {
  int32_t best = INT_MAX;
  visit_row(row, V, [&](int32_t v, float x) {
    if (x == mx && v < best) best = v;
  });
  if (threadIdx.x == 0) sm.imin = INT_MAX;
  __syncthreads();
  if (best != INT_MAX) atomicMin(&sm.imin, best);
  __syncthreads();
  const int32_t r = sm.imin;
  __syncthreads();
  return r;
}

__device__ void hist_clear(Smem& sm) {
  for (int j = threadIdx.x; j < kMaxBins; j += kThreads) {
    sm.bin_n[j] = 0;
    sm.bin_hi[j] = 0;
    sm.bin_lo[j] = 0;
  }
  __syncthreads();
}
__device__ __forceinline__ void hist_add(Smem& sm, uint32_t dg, uint32_t key) {
  const uint32_t u = uint32_t(mass_units(key));
  atomicAdd(&sm.bin_n[dg], 1u);
  atomicAdd(&sm.bin_hi[dg], u >> 12);
  atomicAdd(&sm.bin_lo[dg], u & 4095u);
}
__device__ void hist_finish(Smem& sm) {
  __syncthreads();
  for (int j = threadIdx.x; j < kMaxBins; j += kThreads) {
    sm.count[j] = int64_t(sm.bin_n[j]);
    sm.units[j] = int64_t(sm.bin_hi[j]) * 4096 + int64_t(sm.bin_lo[j]);
  }
  __syncthreads();
}

// The level-l histogram of sel into sm.count / sm.units; with total != null
// (level 0, nothing excluded) also the sum of every w in double.
template <class T>
__device__ void row_histogram(const T* row, int32_t V, float inv_t, float m, const Select& sel, int l, Smem& sm,
                              double* total) {
  hist_clear(sm);
  const float lo = total ? -INFINITY : skip_below(range_lo(sel));
  const float hi = total ? INFINITY : skip_above(range_hi(sel, l));
  double s = 0;
  visit_row(row, V, [&](int32_t v, float x) {
    const float d = dz_of(x, inv_t, m);
    if (d < lo || d > hi) return;
    const float w = expf(d);
    s += double(w);
    const uint32_t key = __float_as_uint(w);
    if (!in_level(sel, l, key, v)) return;
    hist_add(sm, key_digit(key, l), key);  // the mass too: top-k's walk needs the kept mass
  });
  if (total) *total = block_sum(s, sm);
  hist_finish(sm);
}

// descend() of sampling_select.h on one warp: lane g holds bin group g and
// the sums are formed in the same association, so the decision and its
// bits are the host's. Every lane of the warp calls it; one lane writes s.
__device__ void descend_warp(Select& s, const int64_t* count, const int64_t* units, int l, float top_p) {
  if (s.state != kDescending) return;  // the same in every lane
  const int lane = threadIdx.x & 31;
  const int nb = level_bins(l), per = nb / 32;
  double gm = 0;
  int64_t gc = 0;
  for (int i = 0; i < per; ++i) {
    const int j = nb - 1 - lane * per - i;
    gm += bin_mass(s, units, l, j);
    gc += count[j];
  }
  double em = 0, total = 0;
  int64_t ec = 0;
  for (int h = 0; h < 32; ++h) {
    const double vm = __shfl_sync(0xffffffffu, gm, h);
    const int64_t vc = __shfl_sync(0xffffffffu, gc, h);
    if (h < lane) {
      em += vm;
      ec += vc;
    }
    total += vm;
  }
  const double need = l == 0 && s.need < 0 ? double(top_p) * total : s.need;
  double am = s.above_mass + em;
  int64_t ac = s.above_count + ec;
  int hit = -1;
  for (int i = 0; i < per; ++i) {
    const int j = nb - 1 - lane * per - i;
    const double mj = bin_mass(s, units, l, j);
    const bool reach = s.by_mass ? am + mj >= need : double(ac + count[j]) >= need;
    if (reach || j == 0) {
      hit = j;
      break;
    }
    am += mj;
    ac += count[j];
  }
  const unsigned ballot = __ballot_sync(0xffffffffu, hit >= 0);  // lane 31 always reaches bin 0
  if (lane == __ffs(ballot) - 1) {
    s.need = need;
    finish_level(s, l, hit, count[hit], bin_mass(s, units, l, hit), am, ac);
  }
  __syncwarp();
}

// Count of this row's ties at sel.cut.thr inside sel.within.
template <class T>
__device__ int64_t row_tie_count(const T* row, int32_t V, float inv_t, float m, const Select& sel, Smem& sm) {
  const float lo = skip_below(sel.cut.thr), hi = skip_above(sel.cut.thr);
  int64_t n = 0;
  visit_row(row, V, [&](int32_t v, float x) {
    const float d = dz_of(x, inv_t, m);
    if (d < lo || d > hi) return;
    const uint32_t key = __float_as_uint(expf(d));
    if (key == sel.cut.thr && in_cut(sel.within, key, v)) ++n;
  });
  return block_sum(n, sm);
}

// The id of the r-th (1-based) tie at sel.cut.thr inside sel.within, in id order.
template <class T>
__device__ int32_t row_rth_tie(const T* row, int32_t V, float inv_t, float m, const Select& sel, int64_t r,
                               Smem& sm) {
  if (threadIdx.x == 0) sm.found = INT_MAX;
  __syncthreads();
  const uint32_t thr = sel.cut.thr;
  const float lo = skip_below(thr), hi = skip_above(thr);
  int64_t before = 0;
  for (int32_t c0 = 0; c0 < V; c0 += kChunk) {
    const int32_t v0 = c0 + int32_t(threadIdx.x) * kPerThread;
    float x[kPerThread];
    load8(row, V, v0, x);
    uint32_t tie_mask = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const float d = dz_of(x[j], inv_t, m);
      if (v0 + j >= V || d < lo || d > hi) continue;
      const uint32_t key = __float_as_uint(expf(d));
      if (key == thr && in_cut(sel.within, key, v0 + j)) tie_mask |= 1u << j;
    }
    int32_t total;
    const int64_t excl = before + block_exclusive_scan(int32_t(__popc(tie_mask)), sm, total);
    if (excl < r && r <= excl + __popc(tie_mask)) {
      int64_t k = excl;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        if ((tie_mask >> j) & 1u)
          if (++k == r) sm.found = v0 + j;  // exactly one thread, once
    }
    before += total;
    if (before >= r) break;  // uniform: total is the same in every thread
  }
  __syncthreads();
  const int32_t id = sm.found;
  __syncthreads();
  return id;
}

__device__ __forceinline__ float kept_lo(const Select& sel) {
  return skip_below(sel.cut.thr > sel.within.thr ? sel.cut.thr : sel.within.thr);
}
__device__ __forceinline__ bool kept(const Select& sel, uint32_t key, int32_t v) {
  return in_cut(sel.within, key, v) && in_cut(sel.cut, key, v);
}

// The kept mass, summed in double (fixed order).
template <class T>
__device__ double row_kept_mass(const T* row, int32_t V, float inv_t, float m, const Select& sel, Smem& sm) {
  const float lo = kept_lo(sel);
  double s = 0;
  visit_row(row, V, [&](int32_t v, float x) {
    const float d = dz_of(x, inv_t, m);
    if (d < lo) return;
    const float w = expf(d);
    if (kept(sel, __float_as_uint(w), v)) s += double(w);
  });
  return block_sum(s, sm);
}

// The walk in id order over [begin, end) (begin a multiple of kPerThread),
// its cumulative weight starting at `before` (advanced by every chunk that
// does not hit): the first kept id whose cumulative weight exceeds target
// goes to sm.found (atomicMin) and the last kept id with w > 0 seen to
// sm.last (atomicMax); walk_start resets both. Returns whether it hit (the
// same in every thread).
__device__ void walk_start(Smem& sm) {
  if (threadIdx.x == 0) {
    sm.found = INT_MAX;
    sm.last = -1;
  }
  __syncthreads();
}
template <class T>
__device__ bool walk_span(const T* row, int32_t begin, int32_t end, float inv_t, float m, const Select& sel,
                          double target, double& before, Smem& sm) {
  const float lo = kept_lo(sel);
  int32_t last = -1;
  bool hit_any = false;
  // The next chunk's logits are loaded before this chunk's scan and its
  // barriers, so that the loads overlap them.
  float next[kPerThread];
  load8(row, end, begin + int32_t(threadIdx.x) * kPerThread, next);
  for (int32_t c0 = begin; c0 < end; c0 += kChunk) {
    const int32_t v0 = c0 + int32_t(threadIdx.x) * kPerThread;
    float x[kPerThread], w[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) x[j] = next[j];
    if (c0 + kChunk < end) load8(row, end, v0 + kChunk, next);
    double local = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int32_t v = v0 + j;
      w[j] = 0.0f;
      const float d = v < end ? dz_of(x[j], inv_t, m) : -INFINITY;
      if (d >= lo) {
        const float e = expf(d);
        if (kept(sel, __float_as_uint(e), v)) w[j] = e;
      }
      local += double(w[j]);
      if (w[j] > 0.0f) last = v;
    }
    double chunk_total;
    double cum = before + block_exclusive_scan(local, sm, chunk_total);
    int32_t hit = INT_MAX;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      cum += double(w[j]);
      if (hit == INT_MAX && w[j] > 0.0f && cum > target) hit = v0 + j;
    }
    if (hit != INT_MAX) atomicMin(&sm.found, hit);  // integer: any order gives the same minimum
    before += chunk_total;
    if (__syncthreads_or(hit != INT_MAX)) {
      hit_any = true;
      break;
    }
  }
  if (last >= 0) atomicMax(&sm.last, last);
  __syncthreads();
  return hit_any;
}
// The walk's pick: the hit, or the last kept id with w > 0 when rounding
// left the walk short (-1 if it saw none).
__device__ int32_t walk_pick(Smem& sm) {
  const int32_t chosen = sm.found != INT_MAX ? sm.found : sm.last;
  __syncthreads();
  return chosen;
}

// The whole kept set walked in id order (-1 if the row keeps none).
template <class T>
__device__ int32_t row_walk(const T* row, int32_t V, float inv_t, float m, const Select& sel, double target,
                            Smem& sm) {
  walk_start(sm);
  double before = 0;
  walk_span(row, 0, V, inv_t, m, sel, target, before, sm);
  return walk_pick(sm);
}

// Greedy in one pass: the max of the raw logits and its lowest id (each
// thread visits its ids in increasing order; strict > keeps its first).
template <class T>
__device__ float row_argmax(const T* row, int32_t V, Smem& sm, int32_t& id) {
  float best = -INFINITY;
  int32_t best_id = INT_MAX;
  visit_row(row, V, [&](int32_t v, float x) {
    if (best_id == INT_MAX || x > best) {
      best = x;
      best_id = v;
    }
  });
  const float bx = block_max(best, sm);
  if (threadIdx.x == 0) sm.imin = INT_MAX;
  __syncthreads();
  if (best == bx) atomicMin(&sm.imin, best_id);
  __syncthreads();
  id = sm.imin;
  __syncthreads();
  return bx;
}

// ---- without truncation: one pass, then a walk of one part -----------------
// Each warp folds one part of the row, a contiguous id range, into (max z,
// sum of exp(z - max)) with kPartLoads 16-byte loads per lane in flight.
// The parts' masses, rescaled to the row max in double and summed in part
// (= id) order, give the total and the part where the cumulative mass first
// exceeds the target; the walk then reads that part only (and what follows
// when rounding leaves it short), about 1/32 of the row, instead of half.
constexpr int kPartLoads = 4;

// Part w holds ids [w * S, (w + 1) * S) clipped to V: S is V / kWarps rounded
// up to a multiple of kPerThread, so that a 16-byte aligned row has aligned
// parts and the walk (kPerThread ids per thread) can start at a part.
__device__ __forceinline__ int32_t part_size(int32_t V) {
  return ((V + kWarps - 1) / kWarps + kPerThread - 1) / kPerThread * kPerThread;
}

// s * exp(mi - m): a sum relative to its max mi moved to a max m >= mi.
__device__ __forceinline__ double rescale(double s, float mi, float m) {
  return (s == 0 || mi == m) ? s : s * exp(double(mi) - double(m));
}

// Folds the z of N ids into a lane's (mt, st): one rescale at most, then
// exp(z - mt) summed in float by fours (one f32 -> f64 conversion per four:
// conversions are a slow pipe) and in double across them.
template <int N>
__device__ __forceinline__ void fold(const float (&z)[N], float& mt, double& st) {
  float bm = z[0];
#pragma unroll
  for (int i = 1; i < N; ++i) bm = fmaxf(bm, z[i]);  // a NaN is left to exp below
  if (bm > mt) {
    st = rescale(st, mt, bm);
    mt = bm;
  }
  if constexpr (N == 1) {
    st += double(expf(__fsub_rn(z[0], mt)));
  } else {
    static_assert(N % 4 == 0);
    double s = 0;
#pragma unroll
    for (int g = 0; g < N; g += 4) {
      const float e = __fadd_rn(__fadd_rn(expf(__fsub_rn(z[g], mt)), expf(__fsub_rn(z[g + 1], mt))),
                                __fadd_rn(expf(__fsub_rn(z[g + 2], mt)), expf(__fsub_rn(z[g + 3], mt))));
      s += double(e);
    }
    st += s;
  }
}

// Every lane of the warp gets the part [begin, end)'s (max z, sum of
// exp(z - max)), the same bits in every lane. Ids before the first 16-byte
// boundary and after the last one are read one per lane (fewer than 8 each).
// kPipelined: the next kPartLoads loads go out before the current ones are
// folded (twice the registers; the same folds in the same order).
template <class T, bool kPipelined = false>
__device__ void warp_part(const T* row, int32_t begin, int32_t end, float inv_t, float& mt, double& st) {
  constexpr int kVec = 16 / int(sizeof(T));
  const int32_t lane = int32_t(threadIdx.x & 31);
  // Not -inf: a -inf logit then adds exp(-inf) = 0, not exp(-inf - -inf) =
  // NaN (the CPU op gives it weight 0 too).
  mt = -FLT_MAX;
  st = 0;
  auto one = [&](int32_t v) {
    const float z[1] = {__fmul_rn(load_f32(row, v), inv_t)};
    fold(z, mt, st);
  };
  const int32_t head =
      min(int32_t((16 - (reinterpret_cast<uintptr_t>(row + begin) & 15u)) & 15u) / int32_t(sizeof(T)), end - begin);
  if (lane < head) one(begin + lane);
  const int32_t a = begin + head, nvec = (end - a) / kVec;
  const uint4* p = reinterpret_cast<const uint4*>(row + a);
  // Past the part: -inf logits (weight 0), in either dtype's bits.
  const uint32_t ninf = sizeof(T) == 4 ? 0xff800000u : 0xff80ff80u;
  auto load = [&](int32_t i0, uint4(&q)[kPartLoads]) {
#pragma unroll
    for (int j = 0; j < kPartLoads; ++j) {
      const int32_t i = i0 + j * 32 + lane;
      q[j] = i < nvec ? __ldg(p + i) : make_uint4(ninf, ninf, ninf, ninf);
    }
  };
  uint4 q[kPartLoads];
  if constexpr (kPipelined) load(0, q);
  for (int32_t i0 = 0; i0 < nvec; i0 += 32 * kPartLoads) {
    uint4 next[kPartLoads];
    if constexpr (kPipelined) {
      if (i0 + 32 * kPartLoads < nvec) load(i0 + 32 * kPartLoads, next);
    } else {
      load(i0, q);
    }
    // Folded 16 ids at a time (the registers for 32 bf16 would spill).
    constexpr int kFoldVecs = 16 / kVec;
#pragma unroll
    for (int g = 0; g < kPartLoads; g += kFoldVecs) {
      float z[16];
#pragma unroll
      for (int j = 0; j < kFoldVecs; ++j) {
        float x[kVec];
        unpack(q[g + j], x);
#pragma unroll
        for (int k = 0; k < kVec; ++k) z[j * kVec + k] = __fmul_rn(x[k], inv_t);
      }
      fold(z, mt, st);
    }
    if constexpr (kPipelined) {
#pragma unroll
      for (int j = 0; j < kPartLoads; ++j) q[j] = next[j];
    }
  }
  if (a + nvec * kVec + lane < end) one(a + nvec * kVec + lane);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, mt, o);
    const double so = __shfl_xor_sync(0xffffffffu, st, o);
    const float mn = fmaxf(mt, mo);
    st = rescale(st, mt, mn) + rescale(so, mo, mn);  // a + b == b + a: both lanes get the same bits
    mt = mn;
  }
}

// The one pass and the choice of the part: sm.row_m (max z), sm.row_total
// (the parts' masses summed in part order), sm.walk_target (u * total),
// sm.walk_part (the first part whose inclusive cumulative mass exceeds the
// target; it has a mass > 0) and sm.walk_before (the mass before it).
// choose_part: the choice alone, from the parts' (max, sum) in sm.part_max
// and sm.part_sum (every thread of the block calls it).
__device__ void choose_part(double u, Smem& sm) {
  const int32_t w = int32_t(threadIdx.x >> 5), lane = int32_t(threadIdx.x & 31);
  if (w == 0) {
    const float mw = sm.part_max[lane];
    float m = mw;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    sm.part_sum[lane] = rescale(sm.part_sum[lane], mw, m);
    __syncwarp();
    if (lane == 0) {
      double total = 0;
      for (int i = 0; i < kWarps; ++i) total += sm.part_sum[i];
      // u < 1 has 24 bits, so u * total < total: some part is reached
      // whenever total is finite and > 0 (otherwise the row is flagged).
      const double target = u * total;
      double before = 0;
      int32_t part = kWarps - 1;
      for (int i = 0; i < kWarps; ++i) {
        if (before + sm.part_sum[i] > target) {
          part = i;
          break;
        }
        before += sm.part_sum[i];
      }
      sm.row_m = m;
      sm.row_total = total;
      sm.walk_target = target;
      sm.walk_part = part;
      sm.walk_before = before;
    }
  }
  __syncthreads();
}

template <class T>
__device__ void row_parts(const T* row, int32_t V, float inv_t, double u, Smem& sm) {
  const int32_t S = part_size(V), w = int32_t(threadIdx.x >> 5), lane = int32_t(threadIdx.x & 31);
  const int32_t begin = min(w * S, V);
  float mt;
  double st;
  warp_part(row, begin, min(begin + S, V), inv_t, mt, st);
  if (lane == 0) {
    sm.part_max[w] = mt;
    sm.part_sum[w] = st;
  }
  __syncthreads();
  choose_part(u, sm);
}

// Without truncation: the token (its part's walk, started from the mass
// before the part) and m, total. The parts' masses and the walk's weights
// round differently (exp(z - part max) rescaled vs expf(z - m)), so the
// walk may end its part short of the target: it then goes on into the next
// parts, and if even the row's end is short (the target within rounding of
// the total), takes the last id with w > 0, as the CPU op does.
template <class T>
__device__ int32_t walk_untruncated(const T* row, int32_t V, float inv_t, Smem& sm, float& m, double& total) {
  m = sm.row_m;
  total = sm.row_total;
  if (!(isfinite(total) && total > 0)) return -1;  // the same in every thread
  const Select all = select_none();
  const int32_t S = part_size(V), begin = sm.walk_part * S, end = min(begin + S, V);
  const double target = sm.walk_target;
  double before = sm.walk_before;
  walk_start(sm);
  if (!walk_span(row, begin, end, inv_t, m, all, target, before, sm) &&
      !walk_span(row, end, V, inv_t, m, all, target, before, sm)) {
    const bool none = sm.last < 0;  // read after walk_span's last barrier
    __syncthreads();
    if (none) {
      // No w > 0 from the part on (it cannot happen with the part's mass
      // > 0 unless that mass is below the float weights' range): the last
      // one before it.
      double b0 = 0;
      walk_span(row, 0, begin, inv_t, m, all, INFINITY, b0, sm);
    }
  }
  return walk_pick(sm);
}

template <class T>
__device__ int32_t sample_untruncated(const T* row, int32_t V, float inv_t, double u, Smem& sm, float& m,
                                      double& total) {
  row_parts(row, V, inv_t, u, sm);
  return walk_untruncated(row, V, inv_t, sm, m, total);
}

// ---- the search on candidates compacted to shared memory -------------------
// Once level 0 has fixed the exponent of the threshold, every later decision
// (levels 1-3, the tie cut, top-p inside top-k, the walk) only involves the
// tokens with a key in that bin or above. When they fit (kCap), one ordered
// pass copies their (key, id) to shared memory in id order and the rest of
// the search runs there instead of re-reading the row.
constexpr int kCap = 16384;
constexpr size_t kCandBytes = size_t(kCap) * sizeof(uint2);

template <class T>
__device__ int32_t row_compact(const T* row, int32_t V, float inv_t, float m, Cut keep, Cut within, uint2* cand,
                               Smem& sm) {
  const float lo = skip_below(keep.thr > within.thr ? keep.thr : within.thr);
  int32_t base = 0;
  float next[kPerThread];  // prefetched as in row_walk
  load8(row, V, int32_t(threadIdx.x) * kPerThread, next);
  for (int32_t c0 = 0; c0 < V; c0 += kChunk) {
    const int32_t v0 = c0 + int32_t(threadIdx.x) * kPerThread;
    float x[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) x[j] = next[j];
    if (c0 + kChunk < V) load8(row, V, v0 + kChunk, next);
    uint32_t keys[kPerThread];
    uint32_t mask = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      keys[j] = 0;
      const float d = dz_of(x[j], inv_t, m);
      if (v0 + j >= V || d < lo) continue;
      keys[j] = __float_as_uint(expf(d));
      if (in_cut(keep, keys[j], v0 + j) && in_cut(within, keys[j], v0 + j)) mask |= 1u << j;
    }
    int32_t total;
    int32_t pos = base + block_exclusive_scan(int32_t(__popc(mask)), sm, total);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
      if (((mask >> j) & 1u) && pos < kCap) cand[pos++] = make_uint2(keys[j], uint32_t(v0 + j));
    base += total;
  }
  __syncthreads();
  return base < kCap ? base : kCap;
}

__device__ void cand_histogram(const uint2* cand, int32_t n, const Select& sel, int l, Smem& sm) {
  hist_clear(sm);
  for (int32_t i = threadIdx.x; i < n; i += kThreads) {
    const uint32_t key = cand[i].x;
    if (in_level(sel, l, key, int32_t(cand[i].y))) hist_add(sm, key_digit(key, l), key);
  }
  hist_finish(sm);
}

__device__ int32_t cand_rth_tie(const uint2* cand, int32_t n, const Select& sel, int64_t r, Smem& sm) {
  if (threadIdx.x == 0) sm.found = INT_MAX;
  __syncthreads();
  int64_t before = 0;
  for (int32_t c0 = 0; c0 < n; c0 += kThreads) {
    const int32_t i = c0 + int32_t(threadIdx.x);
    const bool tie = i < n && cand[i].x == sel.cut.thr && in_cut(sel.within, cand[i].x, int32_t(cand[i].y));
    int32_t total;
    const int64_t excl = before + block_exclusive_scan(int32_t(tie), sm, total);
    if (tie && excl + 1 == r) sm.found = int32_t(cand[i].y);
    before += total;
    if (before >= r) break;
  }
  __syncthreads();
  const int32_t id = sm.found;
  __syncthreads();
  return id;
}

__device__ int32_t cand_walk(const uint2* cand, int32_t n, const Select& sel, double target, Smem& sm) {
  if (threadIdx.x == 0) {
    sm.found = INT_MAX;
    sm.last = -1;
  }
  __syncthreads();
  double before = 0;
  int32_t last = -1;
  for (int32_t c0 = 0; c0 < n; c0 += kThreads) {
    const int32_t i = c0 + int32_t(threadIdx.x);
    float w = 0.0f;
    int32_t id = -1;
    if (i < n) {
      id = int32_t(cand[i].y);
      if (kept(sel, cand[i].x, id)) w = __uint_as_float(cand[i].x);
    }
    if (w > 0.0f) last = id;
    double chunk_total;
    const double cum = before + block_exclusive_scan(double(w), sm, chunk_total) + double(w);
    const bool hit = w > 0.0f && cum > target;
    if (hit) atomicMin(&sm.found, id);
    before += chunk_total;
    if (__syncthreads_or(hit)) break;
  }
  if (last >= 0) atomicMax(&sm.last, last);
  __syncthreads();
  const int32_t chosen = sm.found != INT_MAX ? sm.found : sm.last;
  __syncthreads();
  return chosen;
}

// Runs the search of sm.sel (levels 0-3, then the tie cut) on one row, or
// on the candidates when *ncand >= 0. total_out: the level-0 row pass also
// sums every w into it. cand (kCap entries, may be null): after a level-0
// row pass that leaves the search descending, the candidates are compacted
// there when they fit (*ncand set).
template <class T>
__device__ void row_search(const T* row, int32_t V, float inv_t, float m, float top_p, Smem& sm, double* total_out,
                           uint2* cand, int32_t* ncand) {
  for (int l = 0; l < kLevels; ++l) {
    if (sm.sel.state != kDescending) break;  // uniform: read after a barrier
    const Select sel = sm.sel;
    if (*ncand >= 0) cand_histogram(cand, *ncand, sel, l, sm);
    else row_histogram(row, V, inv_t, m, sel, l, sm, l == 0 ? total_out : nullptr);
    if (threadIdx.x < 32)
      descend_warp(sm.sel, sm.count, sm.units, l, top_p);
    __syncthreads();
    if (l == 0 && *ncand < 0 && cand != nullptr && sm.sel.state == kDescending) {
      const Select d = sm.sel;
      const int64_t n = d.above_count + int64_t(sm.count[key_digit(d.prefix, 0)]);
      if (n <= kCap) {
        const Cut keep = d.prefix > 0 ? Cut{d.prefix - 1, -1} : cut_all();  // keys >= the bin's lower edge
        *ncand = row_compact(row, V, inv_t, m, keep, d.within, cand, sm);
      }
    }
  }
  if (sm.sel.state == kNeedTie) {
    const Select sel = sm.sel;
    const int32_t id = *ncand >= 0 ? cand_rth_tie(cand, *ncand, sel, sel.tie_rank, sm)
                                   : row_rth_tie(row, V, inv_t, m, sel, sel.tie_rank, sm);
    if (threadIdx.x == 0) {
      sm.sel.cut.lim = id;
      sm.sel.state = kIdle;
    }
    __syncthreads();
  }
}

__device__ __forceinline__ int64_t logit_row_of(const int32_t* rows, int64_t r, int64_t B, DeviceFlags* flags) {
  if (rows == nullptr) return r;
  const int64_t lr = rows[r];
  if (lr < 0 || lr >= B) {
    if (threadIdx.x == 0) flag_bad_id(flags, FlagSite::sampling, r, lr);
    return -1;
  }
  return lr;
}

__device__ __forceinline__ void write_bad_row(int32_t* tokens, float* logprobs, int64_t r) {
  if (threadIdx.x == 0) {
    tokens[r] = 0;
    logprobs[r] = NAN;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(int32_t* __restrict__ tokens, float* __restrict__ logprobs, const T* __restrict__ logits,
                  int64_t B, int32_t V, const int32_t* __restrict__ logit_rows, const int64_t* __restrict__ streams,
                  const int64_t* __restrict__ counters, uint64_t seed, float temperature, int top_k, float top_p,
                  DeviceFlags* flags) {
  __shared__ Smem sm;
  extern __shared__ uint2 cand[];  // kCap candidates (dynamic shared memory)
  const int64_t r = blockIdx.x;
  const int64_t lr = logit_row_of(logit_rows, r, B, flags);
  if (lr < 0) return write_bad_row(tokens, logprobs, r);
  const T* row = logits + lr * int64_t(V);

  if (temperature == 0.0f) {
    // Greedy: the max of the raw logits, ties to the lowest id.
    int32_t chosen;
    const float mx = row_argmax(row, V, sm, chosen);
    const double s = row_sum_greedy(row, V, mx, sm);
    if (threadIdx.x == 0) {
      if (!isfinite(s) || chosen == INT_MAX) {
        flag_non_finite(flags, FlagSite::sampling, r);
        tokens[r] = 0;
        logprobs[r] = NAN;
      } else {
        tokens[r] = chosen;
        logprobs[r] = float(-log(s));
      }
    }
    return;
  }

  // Top-k and/or top-p (the launcher sends the rows without either to
  // untruncated_kernel).
  const float inv_t = 1.0f / temperature;  // the CPU op's z
  const bool use_k = top_k > 0 && top_k < V, use_p = top_p < 1.0f;
  int32_t ncand = -1;
  const float m = __fmul_rn(row_max(row, V, sm), inv_t);  // max z: x -> x * inv_t is monotonic
  if (threadIdx.x == 0) {
    sm.sel = select_none();
    if (use_k) start_top_k(sm.sel, top_k);
    else start_top_p(sm.sel, false, top_p);
  }
  __syncthreads();
  double total;
  row_search(row, V, inv_t, m, top_p, sm, &total, cand, &ncand);
  if (use_k && use_p) {
    // Top-p searches inside the top-k cut: compact that when not yet done.
    if (ncand < 0 && top_k <= kCap) ncand = row_compact(row, V, inv_t, m, sm.sel.cut, cut_all(), cand, sm);
    if (threadIdx.x == 0) start_top_p(sm.sel, true, top_p);
    __syncthreads();
    row_search(row, V, inv_t, m, top_p, sm, nullptr, cand, &ncand);
  }
  if (!(isfinite(total) && total > 0)) {
    if (threadIdx.x == 0) flag_non_finite(flags, FlagSite::sampling, r);
    return write_bad_row(tokens, logprobs, r);
  }
  const Select sel = sm.sel;
  const U32x4 d = philox_draw(seed, uint64_t(streams[r]), uint64_t(counters[r]));
  const double target = double(uniform_float(d.v[0])) * sel.kept_mass;
  const int32_t chosen =
      ncand >= 0 ? cand_walk(cand, ncand, sel, target, sm) : row_walk(row, V, inv_t, m, sel, target, sm);
  if (threadIdx.x == 0) {
    const int32_t c = chosen < 0 ? 0 : chosen;
    tokens[r] = c;
    const float zc = dz_of(load_f32(row, c), inv_t, m);
    logprobs[r] = float(double(zc) - log(total));
  }
}

// The untruncated draw's outputs for row r: the chosen token and its
// log-prob, or, when the row's total is not finite and > 0, the flag and a
// bad row.
template <class T>
__device__ __forceinline__ void write_untruncated(int32_t* tokens, float* logprobs, int64_t r, const T* row,
                                                  int32_t chosen, float inv_t, float m, double total,
                                                  DeviceFlags* flags) {
  if (!(isfinite(total) && total > 0)) {
    if (threadIdx.x == 0) flag_non_finite(flags, FlagSite::sampling, r);
    return write_bad_row(tokens, logprobs, r);
  }
  if (threadIdx.x == 0) {
    const int32_t c = chosen < 0 ? 0 : chosen;
    tokens[r] = c;
    logprobs[r] = float(double(dz_of(load_f32(row, c), inv_t, m)) - log(total));
  }
}

// Temperature > 0 without top-k or top-p (the DAPO recipe's sampling): its
// own kernel, so that the one pass gets the registers it needs and no
// candidate buffer.
template <class T>
__global__ void __launch_bounds__(kThreads)
    untruncated_kernel(int32_t* __restrict__ tokens, float* __restrict__ logprobs, const T* __restrict__ logits,
                       int64_t B, int32_t V, const int32_t* __restrict__ logit_rows,
                       const int64_t* __restrict__ streams, const int64_t* __restrict__ counters, uint64_t seed,
                       float temperature, DeviceFlags* flags) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x;
  const int64_t lr = logit_row_of(logit_rows, r, B, flags);
  if (lr < 0) return write_bad_row(tokens, logprobs, r);
  const T* row = logits + lr * int64_t(V);
  const float inv_t = 1.0f / temperature;  // the CPU op's z
  const U32x4 d = philox_draw(seed, uint64_t(streams[r]), uint64_t(counters[r]));
  float m;
  double total;
  const int32_t chosen = sample_untruncated(row, V, inv_t, double(uniform_float(d.v[0])), sm, m, total);
  write_untruncated(tokens, logprobs, r, row, chosen, inv_t, m, total, flags);
}

// The same draw in two kernels, for the decode step's hundreds of rows and
// for its tail of a few: untruncated_parts_kernel folds each row's 32 parts
// in kPartCtas CTAs of kPartThreads (the same parts and warp_part, so the
// same bits as one CTA's 32 warps), which spreads a row over 8 SMs and
// frees registers to keep two batches of loads in flight per lane;
// untruncated_walk_kernel chooses the part and walks it as
// untruncated_kernel does. Both are programmatic dependents.
constexpr int kPartCtas = 8, kPartThreads = kThreads / kPartCtas;

template <class T>
__global__ void __launch_bounds__(kPartThreads)
    untruncated_parts_kernel(float* __restrict__ part_max, double* __restrict__ part_sum,
                             const T* __restrict__ logits, int64_t B, int32_t V, const int32_t* __restrict__ logit_rows,
                             float temperature) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x / kPartCtas;
  const int32_t w = int32_t(blockIdx.x % kPartCtas) * (kPartThreads / 32) + int32_t(threadIdx.x >> 5);
  // A bad logits row is flagged by the walk kernel, once.
  const int64_t lr = logit_rows == nullptr ? r : int64_t(logit_rows[r]);
  if (lr < 0 || lr >= B) return;
  const int32_t S = part_size(V), begin = min(w * S, V);
  float mt;
  double st;
  warp_part<T, true>(logits + lr * int64_t(V), begin, min(begin + S, V), 1.0f / temperature, mt, st);
  if ((threadIdx.x & 31) == 0) {
    part_max[r * kWarps + w] = mt;
    part_sum[r * kWarps + w] = st;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    untruncated_walk_kernel(int32_t* __restrict__ tokens, float* __restrict__ logprobs,
                            const float* __restrict__ part_max, const double* __restrict__ part_sum,
                            const T* __restrict__ logits, int64_t B, int32_t V, const int32_t* __restrict__ logit_rows,
                            const int64_t* __restrict__ streams, const int64_t* __restrict__ counters, uint64_t seed,
                            float temperature, DeviceFlags* flags) {
  __shared__ Smem sm;
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  const int64_t lr = logit_row_of(logit_rows, r, B, flags);
  if (lr < 0) return write_bad_row(tokens, logprobs, r);
  const T* row = logits + lr * int64_t(V);
  const float inv_t = 1.0f / temperature;
  const U32x4 d = philox_draw(seed, uint64_t(streams[r]), uint64_t(counters[r]));
  if (threadIdx.x < kWarps) {
    sm.part_max[threadIdx.x] = part_max[r * kWarps + threadIdx.x];
    sm.part_sum[threadIdx.x] = part_sum[r * kWarps + threadIdx.x];
  }
  __syncthreads();
  choose_part(double(uniform_float(d.v[0])), sm);
  float m;
  double total;
  const int32_t chosen = walk_untruncated(row, V, inv_t, sm, m, total);
  write_untruncated(tokens, logprobs, r, row, chosen, inv_t, m, total, flags);
}

__global__ void philox_kernel(uint32_t* out, const int64_t* streams, const int64_t* counters, int64_t B,
                              uint64_t seed) {
  const int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (b >= B) return;
  const U32x4 r = philox_draw(seed, uint64_t(streams[b]), uint64_t(counters[b]));
  for (int j = 0; j < 4; ++j) out[b * 4 + j] = r.v[j];
}

// ---- tp shard ops: one CTA per sampled row ---------------------------------

struct ShardArgs {
  int64_t B;
  int32_t V;
  const int32_t* rows;
  float temperature;
  DeviceFlags* flags;
};

__device__ __forceinline__ float inv_t_of(float temperature) { return temperature > 0 ? 1.0f / temperature : 1.0f; }

template <class T>
__global__ void __launch_bounds__(kThreads) shard_max_kernel(float* out, const T* logits, ShardArgs a) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x, lr = logit_row_of(a.rows, r, a.B, a.flags);
  if (lr < 0) {
    if (threadIdx.x == 0) out[r] = NAN;
    return;
  }
  const float mx = row_max(logits + lr * int64_t(a.V), a.V, sm);
  if (threadIdx.x == 0) out[r] = a.temperature > 0 ? __fmul_rn(mx, inv_t_of(a.temperature)) : mx;
}

template <class T>
__global__ void __launch_bounds__(kThreads) shard_sum_kernel(double* out, const T* logits, const float* m, ShardArgs a) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x, lr = logit_row_of(a.rows, r, a.B, nullptr);
  if (lr < 0) {
    if (threadIdx.x == 0) out[r] = NAN;
    return;
  }
  const T* row = logits + lr * int64_t(a.V);
  const double s = a.temperature > 0 ? row_sum_w(row, a.V, inv_t_of(a.temperature), m[r], sm)
                                     : row_sum_greedy(row, a.V, m[r], sm);
  if (threadIdx.x == 0) out[r] = s;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    shard_hist_kernel(int64_t* hist, const T* logits, const float* m, Select* sels, int level, ShardArgs a) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x, lr = logit_row_of(a.rows, r, a.B, nullptr);
  int64_t* h = hist + r * 2 * kMaxBins;
  const Select sel = sels[r];
  if (lr < 0 || sel.state != kDescending) {
    for (int j = threadIdx.x; j < 2 * kMaxBins; j += kThreads) h[j] = 0;
    return;
  }
  row_histogram(logits + lr * int64_t(a.V), a.V, inv_t_of(a.temperature), m[r], sel, level, sm, nullptr);
  for (int j = threadIdx.x; j < kMaxBins; j += kThreads) {
    h[j] = int64_t(sm.count[j]);
    h[kMaxBins + j] = int64_t(sm.units[j]);
  }
}

// One warp per row.
constexpr int kDescendThreads = 32;
__global__ void descend_kernel(Select* sels, const int64_t* hist, int level, float top_p) {
  const int64_t r = blockIdx.x;
  const int64_t* h = hist + r * 2 * kMaxBins;
  descend_warp(sels[r], h, h + kMaxBins, level, top_p);
}

constexpr int kRowThreads = 128;  // select_begin and philox: one thread per row, any count works
__global__ void select_begin_kernel(Select* sels, int64_t R, int top_k, float top_p, int phase, int32_t V) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= R) return;
  const bool use_k = top_k > 0 && top_k < V;
  if (phase == 0) {
    sels[r] = select_none();
    if (use_k) start_top_k(sels[r], top_k);
    else if (top_p < 1.0f) start_top_p(sels[r], false, top_p);
  } else {
    start_top_p(sels[r], true, top_p);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    shard_tie_count_kernel(int64_t* out, const T* logits, const float* m, const Select* sels, ShardArgs a) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x, lr = logit_row_of(a.rows, r, a.B, nullptr);
  const Select sel = sels[r];
  if (lr < 0 || sel.state != kNeedTie) {
    if (threadIdx.x == 0) out[r] = 0;
    return;
  }
  const int64_t n = row_tie_count(logits + lr * int64_t(a.V), a.V, inv_t_of(a.temperature), m[r], sel, sm);
  if (threadIdx.x == 0) out[r] = n;
}

template <class T>
__global__ void __launch_bounds__(kThreads) shard_tie_limit_kernel(Select* sels, const int64_t* tie_counts, int64_t R,
                                                                   int rank, const T* logits, const float* m,
                                                                   ShardArgs a) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x, lr = logit_row_of(a.rows, r, a.B, nullptr);
  const Select sel = sels[r];
  if (lr < 0 || sel.state != kNeedTie) return;
  const int64_t k = local_ties_kept(sel, tie_counts + r, R, rank);
  int32_t lim = k == 0 ? -1 : kNoLimit;
  if (k > 0) lim = row_rth_tie(logits + lr * int64_t(a.V), a.V, inv_t_of(a.temperature), m[r], sel, k, sm);
  if (threadIdx.x == 0) {
    sels[r].cut.lim = lim;
    sels[r].state = kIdle;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    shard_kept_kernel(double* out, const T* logits, const float* m, const Select* sels, ShardArgs a) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x, lr = logit_row_of(a.rows, r, a.B, nullptr);
  if (lr < 0) {
    if (threadIdx.x == 0) out[r] = 0;
    return;
  }
  const double s = row_kept_mass(logits + lr * int64_t(a.V), a.V, inv_t_of(a.temperature), m[r], sels[r], sm);
  if (threadIdx.x == 0) out[r] = s;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    shard_choose_kernel(int32_t* tokens, float* logprobs, const T* logits, const float* m, const Select* sels,
                        const double* sums, const double* kept, int64_t R, int tp, int rank, int64_t vocab_start,
                        const int64_t* streams, const int64_t* counters, uint64_t seed, ShardArgs a) {
  __shared__ Smem sm;
  const int64_t r = blockIdx.x, lr = logit_row_of(a.rows, r, a.B, nullptr);
  double total = 0;
  for (int q = 0; q < tp; ++q) total += sums[q * R + r];
  const bool greedy = a.temperature == 0.0f;
  if (lr < 0 || !(isfinite(total) && total > 0)) {
    if (threadIdx.x == 0 && lr >= 0 && rank == 0) flag_non_finite(a.flags, FlagSite::sampling, r);
    return write_bad_row(tokens, logprobs, r);
  }
  const T* row = logits + lr * int64_t(a.V);
  if (greedy) {
    const int32_t id = row_first_equal(row, a.V, m[r], sm);
    if (threadIdx.x == 0) {
      tokens[r] = id == INT_MAX ? INT_MAX : int32_t(vocab_start + id);
      logprobs[r] = float(-log(total));
    }
    return;
  }
  double mass = 0;
  for (int q = 0; q < tp; ++q) mass += kept[q * R + r];
  const U32x4 d = philox_draw(seed, uint64_t(streams[r]), uint64_t(counters[r]));
  const double target = double(uniform_float(d.v[0])) * mass;
  double before = 0;
  const int holder = holder_shard(kept + r, R, tp, target, &before);
  if (holder != rank) {
    if (threadIdx.x == 0) {
      tokens[r] = -1;
      logprobs[r] = -INFINITY;
    }
    return;
  }
  const float inv_t = inv_t_of(a.temperature);
  const int32_t chosen = row_walk(row, a.V, inv_t, m[r], sels[r], target - before, sm);
  if (threadIdx.x == 0) {
    const int32_t c = chosen < 0 ? 0 : chosen;
    tokens[r] = int32_t(vocab_start + c);
    logprobs[r] = float(double(dz_of(load_f32(row, c), inv_t, m[r])) - log(total));
  }
}

// The shapes and dtypes are checked by the ops:: functions; these are the
// kernels' own limits. Returns R.
int64_t check_shard(Tensor logits, int64_t R, const char* what) {
  // 2^20: the per-bin 12-bit significand halves summed in 32 bits (Smem).
  DAPO_CHECK(logits.size(1) <= (int64_t(1) << 20), what, " vocabulary size ", logits.size(1),
             " (at most 2^20 per row or shard)");
  DAPO_CHECK(R <= int64_t(INT_MAX), what, " rows ", R);
  return R;
}
ShardArgs shard_args(const Ctx& ctx, Tensor logits, Tensor logit_rows, float temperature) {
  return ShardArgs{logits.size(0), int32_t(logits.size(1)),
                   has_logit_rows(logit_rows) ? logit_rows.ptr<int32_t>() : nullptr, temperature, ctx.flags};
}
template <class F>
void by_dtype(Tensor logits, F&& f) {
  if (logits.dtype == DType::f32) f(static_cast<const float*>(logits.data));
  else f(static_cast<const __nv_bfloat16*>(logits.data));
}
// The shard ops' common tail: nothing for R == 0, else launch(x, args,
// stream) with the logits' typed pointer (each launch runs one block of
// kThreads per row), then the launch check.
template <class F>
void launch_rows(const Ctx& ctx, int64_t R, Tensor logits, Tensor logit_rows, float temperature, F&& launch) {
  if (R == 0) return;
  const ShardArgs a = shard_args(ctx, logits, logit_rows, temperature);
  by_dtype(logits, [&](auto* x) { launch(x, a, stream_of(ctx)); });
  DAPO_CUDA_CHECK_LAUNCH();
}
Select* sel_ptr(Tensor select) { return static_cast<Select*>(select.data); }

}  // namespace

void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                   Tensor rng_streams, Tensor rng_counters, const SamplingParams& p) {
  const int64_t R = tokens.numel();
  check_shard(logits, R, "sample_tokens");
  if (R == 0) return;
  const ShardArgs a = shard_args(ctx, logits, logit_rows, p.temperature);
  const bool untruncated = p.temperature > 0.0f && !(p.top_k > 0 && p.top_k < a.V) && !(p.top_p < 1.0f);
  by_dtype(logits, [&](auto* x) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    if (untruncated) {
      if (ctx.scratch != nullptr && ctx.scratch->capacity() - ctx.scratch->used() >= sample_tokens_gpu_scratch_bytes(R)) {
        ArenaScope scope(*ctx.scratch);
        float* part_max = ctx.scratch->alloc_array<float>(size_t(R) * kWarps);
        double* part_sum = ctx.scratch->alloc_array<double>(size_t(R) * kWarps);
        DAPO_CUDA_CHECK(launch_pdl(untruncated_parts_kernel<T>, dim3(unsigned(R * kPartCtas)), dim3(kPartThreads), 0,
                                   stream_of(ctx), part_max, part_sum, x, a.B, a.V, a.rows, p.temperature));
        DAPO_CUDA_CHECK(launch_pdl(untruncated_walk_kernel<T>, dim3(unsigned(R)), dim3(kThreads), 0, stream_of(ctx),
                                   tokens.ptr<int32_t>(), logprobs.ptr<float>(), part_max, part_sum, x, a.B, a.V,
                                   a.rows, rng_streams.ptr<int64_t>(), rng_counters.ptr<int64_t>(), p.seed,
                                   p.temperature, ctx.flags));
        return;
      }
      untruncated_kernel<<<unsigned(R), kThreads, 0, stream_of(ctx)>>>(
          tokens.ptr<int32_t>(), logprobs.ptr<float>(), x, a.B, a.V, a.rows, rng_streams.ptr<int64_t>(),
          rng_counters.ptr<int64_t>(), p.seed, p.temperature, ctx.flags);
      return;
    }
    DAPO_CUDA_CHECK(
        cudaFuncSetAttribute(sample_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kCandBytes)));
    sample_kernel<<<unsigned(R), kThreads, kCandBytes, stream_of(ctx)>>>(
        tokens.ptr<int32_t>(), logprobs.ptr<float>(), x, a.B, a.V, a.rows, rng_streams.ptr<int64_t>(),
        rng_counters.ptr<int64_t>(), p.seed, p.temperature, p.top_k, p.top_p, ctx.flags);
  });
  DAPO_CUDA_CHECK_LAUNCH();
}

void sampling_shard_max(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, float temperature) {
  const int64_t R = check_shard(logits, out.numel(), "sampling_shard_max");
  launch_rows(ctx, R, logits, logit_rows, temperature, [&](auto* x, const ShardArgs& a, cudaStream_t st) {
    shard_max_kernel<<<unsigned(R), kThreads, 0, st>>>(out.ptr<float>(), x, a);
  });
}

void sampling_shard_sum(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m, float temperature) {
  const int64_t R = check_shard(logits, out.numel(), "sampling_shard_sum");
  launch_rows(ctx, R, logits, logit_rows, temperature, [&](auto* x, const ShardArgs& a, cudaStream_t st) {
    shard_sum_kernel<<<unsigned(R), kThreads, 0, st>>>(static_cast<double*>(out.data), x, m.ptr<float>(), a);
  });
}

void sampling_select_begin(const Ctx& ctx, Tensor select, const SamplingParams& p, int phase, int64_t vocab) {
  const int64_t R = select.ndim == 2 ? select.size(0) : 0;
  Select* s = sel_ptr(select);
  if (R == 0) return;
  select_begin_kernel<<<grid_for(R, kRowThreads), kRowThreads, 0, stream_of(ctx)>>>(s, R, p.top_k, p.top_p, phase,
                                                                     int32_t(std::min<int64_t>(vocab, INT_MAX)));
  DAPO_CUDA_CHECK_LAUNCH();
}

void sampling_shard_histogram(const Ctx& ctx, Tensor hist, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select, int level) {
  const int64_t R = check_shard(logits, m.numel(), "sampling_shard_histogram");
  Select* s = sel_ptr(select);
  launch_rows(ctx, R, logits, logit_rows, temperature, [&](auto* x, const ShardArgs& a, cudaStream_t st) {
    shard_hist_kernel<<<unsigned(R), kThreads, 0, st>>>(hist.ptr<int64_t>(), x, m.ptr<float>(), s, level, a);
  });
}

void sampling_descend(const Ctx& ctx, Tensor select, Tensor hist, int level, float top_p) {
  const int64_t R = select.ndim == 2 ? select.size(0) : 0;
  Select* s = sel_ptr(select);
  if (R == 0) return;
  descend_kernel<<<unsigned(R), kDescendThreads, 0, stream_of(ctx)>>>(s, hist.ptr<int64_t>(), level, top_p);
  DAPO_CUDA_CHECK_LAUNCH();
}

void sampling_shard_tie_count(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  const int64_t R = check_shard(logits, out.numel(), "sampling_shard_tie_count");
  Select* s = sel_ptr(select);
  launch_rows(ctx, R, logits, logit_rows, temperature, [&](auto* x, const ShardArgs& a, cudaStream_t st) {
    shard_tie_count_kernel<<<unsigned(R), kThreads, 0, st>>>(out.ptr<int64_t>(), x, m.ptr<float>(), s, a);
  });
}

void sampling_shard_tie_limit(const Ctx& ctx, Tensor select, Tensor tie_counts, int rank, Tensor logits,
                              Tensor logit_rows, Tensor m, float temperature) {
  const int64_t R = check_shard(logits, m.numel(), "sampling_shard_tie_limit");
  Select* s = sel_ptr(select);
  launch_rows(ctx, R, logits, logit_rows, temperature, [&](auto* x, const ShardArgs& a, cudaStream_t st) {
    shard_tie_limit_kernel<<<unsigned(R), kThreads, 0, st>>>(s, tie_counts.ptr<int64_t>(), R, rank, x,
                                                             m.ptr<float>(), a);
  });
}

void sampling_shard_kept_mass(const Ctx& ctx, Tensor out, Tensor logits, Tensor logit_rows, Tensor m,
                              float temperature, Tensor select) {
  const int64_t R = check_shard(logits, out.numel(), "sampling_shard_kept_mass");
  Select* s = sel_ptr(select);
  launch_rows(ctx, R, logits, logit_rows, temperature, [&](auto* x, const ShardArgs& a, cudaStream_t st) {
    shard_kept_kernel<<<unsigned(R), kThreads, 0, st>>>(static_cast<double*>(out.data), x, m.ptr<float>(), s, a);
  });
}

void sampling_shard_choose(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor logit_rows,
                           Tensor m, Tensor select, Tensor sums, Tensor kept, Tensor rng_streams,
                           Tensor rng_counters, const SamplingParams& p, int rank, int64_t vocab_start) {
  const int64_t R = check_shard(logits, tokens.numel(), "sampling_shard_choose");
  Select* s = sel_ptr(select);
  const int tp = int(sums.size(0));
  launch_rows(ctx, R, logits, logit_rows, p.temperature, [&](auto* x, const ShardArgs& a, cudaStream_t st) {
    shard_choose_kernel<<<unsigned(R), kThreads, 0, st>>>(
        tokens.ptr<int32_t>(), logprobs.ptr<float>(), x, m.ptr<float>(), s, static_cast<const double*>(sums.data),
        static_cast<const double*>(kept.data), R, tp, rank, vocab_start, rng_streams.ptr<int64_t>(),
        rng_counters.ptr<int64_t>(), p.seed, a);
  });
}

void philox_draws(const Ctx& ctx, Tensor out, Tensor rng_streams, Tensor rng_counters, uint64_t seed) {
  const int64_t B = rng_streams.numel();
  DAPO_CHECK_SHAPE(out, {B, 4});
  DAPO_CHECK_DTYPE(out, DType::i32);
  DAPO_CHECK_SHAPE(rng_streams, {B});
  DAPO_CHECK_SHAPE(rng_counters, {B});
  DAPO_CHECK_DTYPE(rng_streams, DType::i64);
  DAPO_CHECK_DTYPE(rng_counters, DType::i64);
  for (const Tensor* t : {&out, &rng_streams, &rng_counters}) check_device(ctx, *t, "philox_draws tensor");
  if (B == 0) return;
  philox_kernel<<<grid_for(B, kRowThreads), kRowThreads, 0, stream_of(ctx)>>>(static_cast<uint32_t*>(out.data),
                                                                             rng_streams.ptr<int64_t>(),
                                                                             rng_counters.ptr<int64_t>(), B, seed);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda
