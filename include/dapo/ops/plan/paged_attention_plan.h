// How CUDA paged attention (ops/kv_cache.h) spreads a call over CTAs,
// planned on the host from plain values: the shapes, max_context_len and
// how many CTAs the device holds at once. Plan on the host, run on the
// device (as flashinfer separates them): the kernel file
// (cuda/attention/paged_attention.cu) asks the device for its CTA slots and launches
// what these functions decide, and the decisions are tested without a GPU
// (tests/ops/test_paged_attention_plan.cpp).
//
// The same inputs give the same split, so reruns give the same bits and a
// CUDA graph can capture a call: nothing here reads device data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dapo::ops::plan {

// Kernel constants the plan depends on; cuda/attention/paged_attention.cu
// static_asserts that its kernels match them.
inline constexpr int64_t kPagedRowsPerTile = 8;  // query rows (token, head) per tile: the MMA's N
inline constexpr int64_t kPagedWarps = 4;
// Partials of several merge groups live in ctx.scratch: at most this much.
inline constexpr int64_t kPagedMaxPartialBytes = int64_t(64) << 20;

// Keys a CTA walks per step (kPagedWarps warps of 16 x max(1, 128 / D)
// keys): CTA partitions are multiples of it. D is 16, 32, 64 or 128.
constexpr int64_t paged_unit(int64_t D) { return kPagedWarps * 16 * (D >= 128 ? 1 : 128 / D); }

// How a call is spread over CTAs: each (sequence, KV head, query split)
// gets groups * cluster CTAs over equal stretches of max_context_len
// (rounded up to the CTA's step; groups that would hold no key are
// dropped); the `cluster` CTAs of a merge group are one thread-block
// cluster, and groups > 1 are merged by a second kernel.
struct PagedSplit {
  int64_t groups = 1;
  int64_t cluster = 1;  // 1, 2, 4 or 8
  int64_t qsplit = 1;   // CTAs sharing a sequence's query row tiles (prefill), 1..64
  bool pdl = true;      // launched as a programmatic dependent of the previous kernel
  int64_t stages = 0;   // K/V steps in flight per warp through shared memory (2 or 3, D 64
                        // or 128), or 0: the register-pipelined kernel
};

// A split made concrete: keys per CTA (a multiple of paged_unit(D)) and the
// merge groups that hold keys.
struct PagedPlan {
  int64_t part_len = 0, groups = 1, csize = 1, qsplit = 1, stages = 0;
  bool pdl = true;
  size_t scratch = 0;  // bytes of ctx.scratch the partials need (0: one group)
};

// The shared-memory stages of the default plan: decode (N == B: one new
// token per sequence) with D 64 or 128 takes 3, everything else the
// register kernel (0).
int64_t paged_default_stages(int64_t N, int64_t B, int64_t D);

// `split` made concrete for N new tokens, Hq query heads of dim D and
// contexts up to max_ctx keys.
PagedPlan paged_plan_of(int64_t N, int64_t Hq, int64_t D, int64_t max_ctx, const PagedSplit& split);

// The split the kernel runs by default, for N new tokens over B sequences
// (Hq query heads, Hkv KV heads, dim D, contexts up to max_ctx keys) on a
// device that holds `resident` CTAs of the chosen kernel at once: a rule
// for the tail of a generation round (few long sequences), else a small
// time model over candidate (groups, cluster) pairs (see the .cpp).
PagedSplit paged_choose_split(int64_t N, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t max_ctx,
                              int64_t resident);

}  // namespace dapo::ops::plan
