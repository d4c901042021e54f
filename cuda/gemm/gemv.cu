// CUDA small-batch products (matmul.h at 1-8 input rows; the plan is
// ops/plan/gemv_plan.h): the decode step of a generation round's tail,
// where a product reads megabytes of weights for a handful of rows and is
// bound by those bytes and by its latency, not by arithmetic.
//
// A CTA owns kGemvTileRows weight rows of one segment (for SwiGLU, half
// of them gate rows and half the up rows of the same columns) over the
// whole of K. Its threads
// split K in 16-byte pieces; each thread multiplies its pieces of those
// rows by the same pieces of every input row in fp32 (the input rows come
// through L1, where every CTA of the SM finds them), then a warp butterfly
// and a fixed-order sum over the warps give each output. The order depends
// on K and the CTA's thread count alone (both from the plan), never on M:
// a row's bits do not depend on which other rows share the call.
//
// Launched as a programmatic dependent (ptx/pdl.cuh). The CTA's first
// weight pieces are requested before pdl_wait(): they are what a small
// product spends its time waiting for, and no grid that may still run
// then writes weights (see pdl.cuh's rules). The input rows are read only
// after the wait.
#include <algorithm>

#include "common.cuh"
#include "dapo/ops/matmul.h"
#include "dapo/ops/plan/gemv_plan.h"
#include "gemm/swiglu_math.cuh"
#include "ptx/pdl.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/gemm/gemv.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

constexpr int kR = int(plan::kGemvTileRows);
constexpr int kMaxThreads = int(plan::kGemvMaxThreads);
constexpr int kMaxWarps = kMaxThreads / 32;

struct GemvSegment {
  const bf16_t* w = nullptr;  // (rows, K)
  void* out = nullptr;        // (M, rows): bf16 or f32
  const void* bias = nullptr; // (rows) bf16 or f32, or null
  int64_t rows = 0;
  int64_t first_cta = 0;      // the CTAs before this segment's
  bool out_f32 = false, bias_f32 = false;
};

struct GemvArgs {
  const bf16_t* in = nullptr;  // (M, K)
  int64_t K = 0;
  int nseg = 0;
  GemvSegment seg[kMaxLinearSegments];
};

struct SwigluArgs {
  const bf16_t* in = nullptr;  // (M, K)
  const bf16_t* w_gate = nullptr;
  const bf16_t* w_up = nullptr;  // (I, K) each
  bf16_t* h = nullptr;           // (M, I)
  int64_t K = 0, I = 0;
};

// A weight piece streamed past L1 (it is read once; L1 keeps the input rows).
__device__ __forceinline__ uint4 ld_weight(const bf16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void widen8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

constexpr int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}
constexpr int log2_of(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

// Sums acc[0..N) over the warp's lanes, halving the values a lane keeps at
// each of the first log2(N) exchanges (N a power of two): lane L ends with
// the sums of indices [base, base + N / 32) (or of index base, replicated
// over the lanes that differ only in the bits past log2(N), when N < 32).
// Returns base. Partners add the same two values (a + b == b + a in fp32),
// so the result is one order's, fixed by N.
template <int N>
__device__ __forceinline__ int warp_reduce_scatter(float (&acc)[N], int lane) {
  constexpr int kSteps = log2_of(N) < 5 ? log2_of(N) : 5;
  int base = 0;
  int h = N;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int offset = 16 >> s;
    h /= 2;
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      if (i < h) {
        const float keep = upper ? acc[i + h] : acc[i];
        const float send = upper ? acc[i] : acc[i + h];
        acc[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
      }
    }
    if (upper) base += h;
  }
#pragma unroll
  for (int s = kSteps; s < 5; ++s) acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], 16 >> s);
  return base;
}

// The CTA's NW weight rows (pointers into rows of K) times the M input rows:
// each thread's fp32 sums over its pieces, then over the CTA. On return
// tot[m * NW + r] (shared memory) holds row m's sum for weight row r, for
// every thread of the CTA to read.
template <int M, int NW>
__device__ __forceinline__ void gemv_tile(const bf16_t* const (&w)[NW], const bf16_t* in, int64_t K, float* tot) {
  constexpr int N = pow2_at_least(M * NW);
  __shared__ float red[kMaxWarps][N];
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t pieces = K / plan::kGemvVector, stride = blockDim.x;
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;

  int64_t v = tid;
  uint4 wv[NW];
  if (v < pieces) {
#pragma unroll
    for (int r = 0; r < NW; ++r) wv[r] = ld_weight(w[r] + v * plan::kGemvVector);
  }
  pdl_wait();  // the input rows are the previous kernel's output
  pdl_launch_dependents();
  for (; v < pieces; v += stride) {
    float wf[NW][8];
#pragma unroll
    for (int r = 0; r < NW; ++r) widen8(wv[r], wf[r]);
    const int64_t next = v + stride;
    if (next < pieces) {
#pragma unroll
      for (int r = 0; r < NW; ++r) wv[r] = ld_weight(w[r] + next * plan::kGemvVector);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[8];
      widen8(*reinterpret_cast<const uint4*>(in + m * K + v * plan::kGemvVector), xf);
#pragma unroll
      for (int r = 0; r < NW; ++r) {
        float s = acc[m * NW + r];
#pragma unroll
        for (int j = 0; j < 8; ++j) s = fmaf(xf[j], wf[r][j], s);
        acc[m * NW + r] = s;
      }
    }
  }
  const int base = warp_reduce_scatter<N>(acc, lane);
  constexpr int kKept = N >= 32 ? N / 32 : 1;
  // Below 32 values the lanes that differ only in the low bits hold copies.
  const bool writer = N >= 32 || (lane & (32 / N - 1)) == 0;
  if (writer) {
#pragma unroll
    for (int i = 0; i < kKept; ++i) red[warp][base + i] = acc[i];
  }
  __syncthreads();
  const int warps = int(blockDim.x) >> 5;
  if (tid < M * NW) {
    float s = red[0][tid];
    for (int k = 1; k < warps; ++k) s += red[k][tid];
    tot[tid] = s;
  }
  __syncthreads();
}

template <int M>
__global__ void __launch_bounds__(kMaxThreads) gemv_kernel(const GemvArgs a) {
  __shared__ float tot[M * kR];
  int si = 0;
#pragma unroll
  for (int s = 1; s < kMaxLinearSegments; ++s)
    if (s < a.nseg && int64_t(blockIdx.x) >= a.seg[s].first_cta) si = s;
  const GemvSegment& g = a.seg[si];
  const int64_t row0 = (int64_t(blockIdx.x) - g.first_cta) * kR;
  const bf16_t* w[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r)  // rows past the end read a real row, whose sums are never stored
    w[r] = g.w + std::min<int64_t>(row0 + r, g.rows - 1) * a.K;
  gemv_tile<M, kR>(w, a.in, a.K, tot);
  const int t = int(threadIdx.x);
  if (t >= M * kR) return;
  const int m = t / kR, r = t % kR;
  const int64_t row = row0 + r;
  if (row >= g.rows) return;
  float y = tot[t];
  if (g.bias != nullptr)
    y += g.bias_f32 ? static_cast<const float*>(g.bias)[row]
                    : __bfloat162float(static_cast<const bf16_t*>(g.bias)[row]);
  if (g.out_f32) static_cast<float*>(g.out)[m * g.rows + row] = y;
  else static_cast<bf16_t*>(g.out)[m * g.rows + row] = __float2bfloat16_rn(y);
}

// Gate rows [row0, row0 + kR / 2) and the same up rows (kR weight rows in
// all: 4 rows of 2 products measured faster than 8, H200), h = silu(g) * u
// with g and u each rounded to bf16 first, as the other SwiGLU paths round
// them.
constexpr int kHalf = kR / 2;
template <int M>
__global__ void __launch_bounds__(kMaxThreads) gemv_swiglu_kernel(const SwigluArgs a) {
  __shared__ float tot[M * kR];
  const int64_t row0 = int64_t(blockIdx.x) * kHalf;
  const bf16_t* w[kR];
#pragma unroll
  for (int r = 0; r < kHalf; ++r) {
    const int64_t row = std::min<int64_t>(row0 + r, a.I - 1);
    w[r] = a.w_gate + row * a.K;
    w[kHalf + r] = a.w_up + row * a.K;
  }
  gemv_tile<M, kR>(w, a.in, a.K, tot);
  const int t = int(threadIdx.x);
  if (t >= M * kHalf) return;
  const int m = t / kHalf, r = t % kHalf;
  const int64_t row = row0 + r;
  if (row >= a.I) return;
  const float g = __bfloat162float(__float2bfloat16_rn(tot[m * kR + r]));
  const float u = __bfloat162float(__float2bfloat16_rn(tot[m * kR + kHalf + r]));
  a.h[m * a.I + row] = __float2bfloat16_rn(g * swiglu_sigmoid(g) * u);
}

template <template <int> class Kernel, class Args>
void launch_rows(const Ctx& ctx, int64_t M, const plan::GemvPlan& p, const Args& a) {
  static_assert(plan::kGemvMaxRows == 8, "one instance per row count below");
  auto go = [&](auto kernel) {
    DAPO_CUDA_CHECK(launch_pdl(kernel, dim3(unsigned(p.ctas)), dim3(unsigned(p.threads)), 0, stream_of(ctx), a));
  };
  switch (M) {
    case 1: return go(Kernel<1>::get());
    case 2: return go(Kernel<2>::get());
    case 3: return go(Kernel<3>::get());
    case 4: return go(Kernel<4>::get());
    case 5: return go(Kernel<5>::get());
    case 6: return go(Kernel<6>::get());
    case 7: return go(Kernel<7>::get());
    default: return go(Kernel<8>::get());
  }
}

template <int M>
struct PlainKernel {
  static auto get() { return gemv_kernel<M>; }
};
template <int M>
struct SwigluKernel {
  static auto get() { return gemv_swiglu_kernel<M>; }
};

bool has_shape(const Tensor& t, int64_t rows, int64_t cols) {
  return t.ndim == 2 && t.shape[0] == rows && t.shape[1] == cols;
}

}  // namespace

namespace detail {

bool gemv_supported(const Tensor& in, std::span<const LinearSegment> segs) {
  if (segs.empty() || segs.size() > size_t(kMaxLinearSegments)) return false;
  if (in.dtype != DType::bf16 || in.ndim != 2 || !aligned16(in.data)) return false;
  const int64_t M = in.shape[0], K = in.shape[1];
  if (M < 1 || M > plan::kGemvMaxRows || K < 1 || K % plan::kGemvVector != 0) return false;
  for (const LinearSegment& s : segs) {
    if (s.weight.dtype != DType::bf16 || !aligned16(s.weight.data)) return false;
    if (s.out.dtype != DType::bf16 && s.out.dtype != DType::f32) return false;
    if (!has_shape(s.out, M, s.weight.shape[0])) return false;
    if (s.bias.defined() && s.bias.dtype != DType::bf16 && s.bias.dtype != DType::f32) return false;
  }
  return true;
}

bool gemv_preferred(int64_t M, int64_t K, std::span<const LinearSegment> segs) {
  int64_t rows[kMaxLinearSegments] = {};
  for (size_t i = 0; i < segs.size() && i < size_t(kMaxLinearSegments); ++i) rows[i] = segs[i].weight.shape[0];
  return plan::gemv_preferred(M, K, std::span<const int64_t>(rows, std::min(segs.size(), size_t(kMaxLinearSegments))));
}

void linear_forward_multi_gemv(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segs) {
  DAPO_CHECK(gemv_supported(in, segs), "linear_forward_multi: the small-batch kernel cannot take in ",
             in.shape_string(), " (", dtype_name(in.dtype), ")");
  GemvArgs a;
  a.in = static_cast<const bf16_t*>(in.data);
  a.K = in.shape[1];
  int64_t rows[kMaxLinearSegments] = {};
  int64_t first = 0;
  for (const LinearSegment& s : segs) {
    if (s.weight.shape[0] == 0) continue;  // no CTA for a segment of no rows
    GemvSegment& g = a.seg[a.nseg];
    g.first_cta = first;
    g.w = static_cast<const bf16_t*>(s.weight.data);
    g.out = s.out.data;
    g.bias = s.bias.defined() ? s.bias.data : nullptr;
    g.rows = s.weight.shape[0];
    g.out_f32 = s.out.dtype == DType::f32;
    g.bias_f32 = s.bias.defined() && s.bias.dtype == DType::f32;
    first += plan::gemv_segment_ctas(g.rows);
    rows[a.nseg++] = g.rows;
  }
  if (a.nseg == 0) return;
  const plan::GemvPlan p = plan::gemv_plan(a.K, std::span<const int64_t>(rows, size_t(a.nseg)));
  DAPO_CHECK(p.ctas < (int64_t(1) << 31), "linear_forward_multi: ", p.ctas, " CTAs exceed one launch");
  launch_rows<PlainKernel>(ctx, in.shape[0], p, a);
}

bool linear_swiglu_gemv_supported(const Tensor& h, const Tensor& in, const Tensor& w_gate, const Tensor& w_up) {
  if (in.dtype != DType::bf16 || in.ndim != 2 || !aligned16(in.data)) return false;
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  if (M < 1 || M > plan::kGemvMaxRows || K < 1 || K % plan::kGemvVector != 0 || I < 1) return false;
  for (const Tensor* w : {&w_gate, &w_up})
    if (w->dtype != DType::bf16 || !aligned16(w->data)) return false;
  return h.dtype == DType::bf16 && has_shape(h, M, I);
}

void linear_swiglu_gemv(const Ctx& ctx, Tensor h, Tensor in, Tensor w_gate, Tensor w_up) {
  DAPO_CHECK(linear_swiglu_gemv_supported(h, in, w_gate, w_up),
             "linear_swiglu_forward: the small-batch kernel cannot take in ", in.shape_string());
  SwigluArgs a;
  a.in = static_cast<const bf16_t*>(in.data);
  a.w_gate = static_cast<const bf16_t*>(w_gate.data);
  a.w_up = static_cast<const bf16_t*>(w_up.data);
  a.h = static_cast<bf16_t*>(h.data);
  a.K = in.shape[1];
  a.I = w_gate.shape[0];
  const int64_t rows[] = {2 * a.I};  // gate and up rows, kR a CTA
  const plan::GemvPlan p = plan::gemv_plan(a.K, rows);
  DAPO_CHECK(p.ctas < (int64_t(1) << 31), "linear_swiglu_forward: ", p.ctas, " CTAs exceed one launch");
  launch_rows<SwigluKernel>(ctx, in.shape[0], p, a);
}

}  // namespace detail
}  // namespace dapo::ops::cuda
