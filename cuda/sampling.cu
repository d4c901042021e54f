// CUDA token sampling (include/dapo/ops/sampling.h): the CPU op's rules and
// Philox draw, one CTA per row, no sort.
//
// The order "p descending, ties by id ascending" is the order of the key
// (bits of w = exp(z - m), id): w is a non-negative float, so its bits
// compare as the float does. A prefix of that order is a Cut: every token
// with key > thr, plus the ties key == thr with id <= lim. Top-k and top-p
// each find their cut by a 16-way radix descent over the key bits (8 passes
// of 4 bits); each pass takes per-bin counts and masses with per-thread
// registers and a fixed-order block reduction (no float atomics), so the
// result is the same bits on every run. The ties at the threshold are then
// cut in id order by a block scan. The draw walks the kept set in id order
// with a block-wide prefix sum in double, chunk by chunk.
//
// w is recomputed from the logits in every pass instead of being stored: a
// row is at most 152k values (304 KB in bf16), read from L2 after the first
// pass, and no scratch is needed.
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common.cuh"
#include "dapo/core/rng.h"
#include "dapo/ops/sampling.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 16;           // radix digit: 4 bits
constexpr int kPerThread = 8;       // contiguous ids per thread in an id-order chunk
constexpr int kChunk = kThreads * kPerThread;

struct Cut {
  uint32_t thr;  // key bits of the last kept weight
  int32_t lim;   // ties at thr are kept up to this id
};
__device__ __forceinline__ bool in_cut(Cut c, uint32_t key, int32_t id) {
  return key > c.thr || (key == c.thr && id <= c.lim);
}

struct Smem {
  double d[kWarps][kBins];
  int32_t i[kWarps][kBins];
  double bin_mass[kBins];
  int32_t bin_count[kBins];
  double scan[kWarps];
  int32_t iscan[kWarps];
  int32_t found;
  int32_t last;
  int32_t imin;
};

// z and w exactly as the CPU op rounds them: no fused multiply-add.
template <class T>
__device__ __forceinline__ float z_of(const T* row, int32_t v, float inv_t) {
  return __fmul_rn(load_f32(row, v), inv_t);
}
template <class T>
__device__ __forceinline__ float w_of(const T* row, int32_t v, float inv_t, float m) {
  return expf(__fsub_rn(z_of(row, v, inv_t), m));
}

// A bound on d = z - m below which expf(d) is certainly under the weight
// whose bits are key_lo (a margin of 1e-3 in log space covers the few-ulp
// errors of expf and logf): passes that only look at weights >= key_lo skip
// the exp and the bookkeeping of the rest of the row. Only a shortcut: every
// kept decision is still made on the exact key.
__device__ __forceinline__ float skip_below(uint32_t key_lo) {
  const float w = __uint_as_float(key_lo);
  return w > 0.0f ? logf(w) - 1e-3f : -INFINITY;
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

// The id of the r-th (1-based) token, in id order, with key == thr inside
// `within`.
template <class T>
__device__ int32_t rth_tie(const T* row, int32_t V, float inv_t, float m, Cut within, uint32_t thr, int32_t r,
                           Smem& sm) {
  if (threadIdx.x == 0) sm.found = INT_MAX;
  __syncthreads();
  int32_t before = 0;
  const float lo = skip_below(thr);
  for (int32_t c0 = 0; c0 < V; c0 += kChunk) {
    const int32_t v0 = c0 + int32_t(threadIdx.x) * kPerThread;
    uint32_t tie_mask = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int32_t v = v0 + j;
      if (v < V) {
        const float d = __fsub_rn(z_of(row, v, inv_t), m);
        if (d < lo) continue;
        const uint32_t key = __float_as_uint(expf(d));
        if (key == thr && in_cut(within, key, v)) tie_mask |= 1u << j;
      }
    }
    int32_t total;
    const int32_t excl = before + block_exclusive_scan(int32_t(__popc(tie_mask)), sm, total);
    if (excl < r && r <= excl + __popc(tie_mask)) {
      int32_t k = excl;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        if ((tie_mask >> j) & 1u)
          if (++k == r) sm.found = v0 + j;  // exactly one thread, once
    }
    before += total;
    if (before >= r) break;  // uniform: total is the same in every thread
  }
  __syncthreads();
  return sm.found;
}

// The shortest prefix of `within` (in key order) whose count (kByMass false)
// or mass (kByMass true) reaches `need`.
template <bool kByMass, class T>
__device__ Cut select_cut(const T* row, int32_t V, float inv_t, float m, Cut within, double need, Smem& sm) {
  uint32_t prefix = 0;
  double above = 0;  // count or mass of `within` with a key above the current range
  int32_t eq_count = 0;
  for (int shift = 28; shift >= 0; shift -= 4) {
    const uint32_t hi_mask = shift == 28 ? 0u : (0xffffffffu << (shift + 4));
    int32_t cnt[kBins];
    double mass[kBins];
#pragma unroll
    for (int j = 0; j < kBins; ++j) {
      cnt[j] = 0;
      mass[j] = 0;
    }
    const float lo = skip_below(prefix > within.thr ? prefix : within.thr);
    for (int32_t v = threadIdx.x; v < V; v += kThreads) {
      const float dz = __fsub_rn(z_of(row, v, inv_t), m);
      if (dz < lo) continue;
      const float w = expf(dz);
      const uint32_t key = __float_as_uint(w);
      if ((key & hi_mask) != prefix || !in_cut(within, key, v)) continue;
      const uint32_t d = (key >> shift) & (kBins - 1);
#pragma unroll
      for (int j = 0; j < kBins; ++j)
        if (d == uint32_t(j)) {
          ++cnt[j];
          if constexpr (kByMass) mass[j] += double(w);
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < kBins; ++j) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        cnt[j] += __shfl_xor_sync(0xffffffffu, cnt[j], o);
        if constexpr (kByMass) mass[j] += __shfl_xor_sync(0xffffffffu, mass[j], o);
      }
      if (lane == 0) {
        sm.i[warp][j] = cnt[j];
        sm.d[warp][j] = mass[j];
      }
    }
    __syncthreads();
    if (threadIdx.x < kBins) {
      int32_t c = 0;
      double s = 0;
      for (int w = 0; w < kWarps; ++w) {
        c += sm.i[w][threadIdx.x];
        s += sm.d[w][threadIdx.x];
      }
      sm.bin_count[threadIdx.x] = c;
      sm.bin_mass[threadIdx.x] = s;
    }
    __syncthreads();
    // Every thread makes the same choice from the same shared values. Bin 0
    // is taken when rounding leaves the whole range short of `need`.
    int pick = 0;
    for (int j = kBins - 1; j >= 0; --j) {
      const double val = kByMass ? sm.bin_mass[j] : double(sm.bin_count[j]);
      if (above + val >= need || j == 0) {
        pick = j;
        break;
      }
      above += val;
    }
    eq_count = sm.bin_count[pick];
    prefix |= uint32_t(pick) << shift;
    __syncthreads();
  }
  if (eq_count == 0) return Cut{prefix, -1};
  // How many ties at the threshold (equal weights, taken in id order) reach need.
  int64_t r;
  if constexpr (kByMass) {
    const double wt = double(__uint_as_float(prefix));
    r = wt > 0 ? int64_t(ceil((need - above) / wt)) : eq_count;
  } else {
    r = int64_t(need - above);
  }
  r = r < 1 ? 1 : r;
  if (r >= eq_count) return Cut{prefix, INT_MAX};
  return Cut{prefix, rth_tie(row, V, inv_t, m, within, prefix, int32_t(r), sm)};
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(int32_t* __restrict__ tokens, float* __restrict__ logprobs, const T* __restrict__ logits,
                  int32_t V, const int64_t* __restrict__ streams, const int64_t* __restrict__ counters,
                  uint64_t seed, float temperature, int top_k, float top_p, DeviceFlags* flags) {
  __shared__ Smem sm;
  const int64_t b = blockIdx.x;
  const T* row = logits + b * int64_t(V);

  if (temperature == 0.0f) {
    // Greedy: the max of the raw logits, ties to the lowest id.
    float best = -INFINITY;
    int32_t best_id = INT_MAX;
    for (int32_t v = threadIdx.x; v < V; v += kThreads) {
      const float x = load_f32(row, v);
      if (best_id == INT_MAX || x > best) {  // strict: ties keep this thread's lowest id
        best = x;
        best_id = v;
      }
    }
    const float bx = block_max(best, sm);
    if (threadIdx.x == 0) sm.imin = INT_MAX;
    __syncthreads();
    if (best == bx) atomicMin(&sm.imin, best_id);
    __syncthreads();
    const int32_t chosen = sm.imin;
    double s = 0;
    for (int32_t v = threadIdx.x; v < V; v += kThreads) s += exp(double(load_f32(row, v)) - double(bx));
    s = block_sum(s, sm);
    if (threadIdx.x == 0) {
      if (!isfinite(s) || chosen == INT_MAX) {
        flag_non_finite(flags, FlagSite::sampling, b);
        tokens[b] = 0;
        logprobs[b] = NAN;
      } else {
        tokens[b] = chosen;
        logprobs[b] = float(-log(s));
      }
    }
    return;
  }

  const float inv_t = 1.0f / temperature;  // the CPU op's z
  float m = -INFINITY;
  for (int32_t v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, z_of(row, v, inv_t));
  m = block_max(m, sm);
  double total = 0;
  for (int32_t v = threadIdx.x; v < V; v += kThreads) total += double(w_of(row, v, inv_t, m));
  total = block_sum(total, sm);
  if (!(isfinite(total) && total > 0)) {
    if (threadIdx.x == 0) {
      flag_non_finite(flags, FlagSite::sampling, b);
      tokens[b] = 0;
      logprobs[b] = NAN;
    }
    return;
  }

  const Cut all{0u, INT_MAX};
  Cut ck = all, cp = all;
  double mass = total;
  if (top_k > 0 && top_k < V) {
    ck = select_cut<false>(row, V, inv_t, m, all, double(top_k), sm);
    double s = 0;
    const float lo = skip_below(ck.thr);
    for (int32_t v = threadIdx.x; v < V; v += kThreads) {
      const float dz = __fsub_rn(z_of(row, v, inv_t), m);
      if (dz < lo) continue;
      const float w = expf(dz);
      if (in_cut(ck, __float_as_uint(w), v)) s += double(w);
    }
    mass = block_sum(s, sm);
  }
  if (top_p < 1.0f) {
    cp = select_cut<true>(row, V, inv_t, m, ck, double(top_p) * mass, sm);
    double s = 0;
    const float lo = skip_below(cp.thr > ck.thr ? cp.thr : ck.thr);
    for (int32_t v = threadIdx.x; v < V; v += kThreads) {
      const float dz = __fsub_rn(z_of(row, v, inv_t), m);
      if (dz < lo) continue;
      const float w = expf(dz);
      const uint32_t key = __float_as_uint(w);
      if (in_cut(ck, key, v) && in_cut(cp, key, v)) s += double(w);
    }
    mass = block_sum(s, sm);
  }

  // The walk in id order: the first kept id whose cumulative weight exceeds u * mass.
  const U32x4 r = philox_draw(seed, uint64_t(streams[b]), uint64_t(counters[b]));
  const double target = double(uniform_float(r.v[0])) * mass;
  if (threadIdx.x == 0) {
    sm.found = INT_MAX;
    sm.last = -1;
  }
  __syncthreads();
  double before = 0;
  const float lo = skip_below(cp.thr > ck.thr ? cp.thr : ck.thr);
  int32_t last = -1;  // the last kept id with w > 0: the answer if rounding leaves the walk short
  for (int32_t c0 = 0; c0 < V; c0 += kChunk) {
    const int32_t v0 = c0 + int32_t(threadIdx.x) * kPerThread;
    float w[kPerThread];
    double local = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int32_t v = v0 + j;
      w[j] = 0.0f;
      const float dz = v < V ? __fsub_rn(z_of(row, v, inv_t), m) : -INFINITY;
      if (dz >= lo) {
        const float x = expf(dz);
        const uint32_t key = __float_as_uint(x);
        if (in_cut(ck, key, v) && in_cut(cp, key, v)) w[j] = x;
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
    if (__syncthreads_or(hit != INT_MAX)) break;
  }
  if (last >= 0) atomicMax(&sm.last, last);
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t chosen = sm.found != INT_MAX ? sm.found : sm.last;
    tokens[b] = chosen;
    const float zc = __fsub_rn(z_of(row, chosen, inv_t), m);
    logprobs[b] = float(double(zc) - log(total));
  }
}

__global__ void philox_kernel(uint32_t* out, const int64_t* streams, const int64_t* counters, int64_t B,
                              uint64_t seed) {
  const int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (b >= B) return;
  const U32x4 r = philox_draw(seed, uint64_t(streams[b]), uint64_t(counters[b]));
  for (int j = 0; j < 4; ++j) out[b * 4 + j] = r.v[j];
}

}  // namespace

void sample_tokens(const Ctx& ctx, Tensor tokens, Tensor logprobs, Tensor logits, Tensor rng_streams,
                   Tensor rng_counters, const SamplingParams& p) {
  DAPO_CHECK(logits.dtype == DType::f32 || logits.dtype == DType::bf16, "sample_tokens logits dtype ",
             dtype_name(logits.dtype));
  DAPO_CHECK(logits.ndim == 2, "logits must be (B, V), got ", logits.shape_string());
  const int64_t B = logits.size(0), V = logits.size(1);
  DAPO_CHECK_SHAPE(tokens, {B});
  DAPO_CHECK_SHAPE(logprobs, {B});
  DAPO_CHECK_SHAPE(rng_streams, {B});
  DAPO_CHECK_SHAPE(rng_counters, {B});
  DAPO_CHECK_DTYPE(tokens, DType::i32);
  DAPO_CHECK_DTYPE(logprobs, DType::f32);
  DAPO_CHECK_DTYPE(rng_streams, DType::i64);
  DAPO_CHECK_DTYPE(rng_counters, DType::i64);
  for (const Tensor* t : {&tokens, &logprobs, &logits, &rng_streams, &rng_counters})
    check_device(ctx, *t, "sample_tokens tensor");
  DAPO_CHECK(V >= 1 && V <= std::numeric_limits<int32_t>::max() - kChunk, "vocabulary size ", V);
  DAPO_CHECK(p.temperature >= 0.0f && std::isfinite(p.temperature), "temperature ", p.temperature);
  DAPO_CHECK(p.top_p > 0.0f, "top_p ", p.top_p, " must be > 0 (>= 1 disables it)");
  DAPO_CHECK(B <= int64_t(INT_MAX), "batch ", B);
  if (B == 0) return;
  const auto s = stream_of(ctx);
  if (logits.dtype == DType::f32)
    sample_kernel<float><<<unsigned(B), kThreads, 0, s>>>(
        tokens.ptr<int32_t>(), logprobs.ptr<float>(), logits.ptr<float>(), int32_t(V), rng_streams.ptr<int64_t>(),
        rng_counters.ptr<int64_t>(), p.seed, p.temperature, p.top_k, p.top_p, ctx.flags);
  else
    sample_kernel<__nv_bfloat16><<<unsigned(B), kThreads, 0, s>>>(
        tokens.ptr<int32_t>(), logprobs.ptr<float>(), static_cast<const __nv_bfloat16*>(logits.data), int32_t(V),
        rng_streams.ptr<int64_t>(), rng_counters.ptr<int64_t>(), p.seed, p.temperature, p.top_k, p.top_p,
        ctx.flags);
  DAPO_CUDA_CHECK_LAUNCH();
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
  philox_kernel<<<grid_for(B, 256), 256, 0, stream_of(ctx)>>>(static_cast<uint32_t*>(out.data),
                                                               rng_streams.ptr<int64_t>(),
                                                               rng_counters.ptr<int64_t>(), B, seed);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda
