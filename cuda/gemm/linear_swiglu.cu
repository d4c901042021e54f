// CUDA fused gate/up products and SwiGLU (matmul.h), for the decode
// step's few rows.
//
// The product runs rows-major, unlike linear_multi.cu's transposed skinny
// kernel: the input rows are wgmma's 64-row M side (one consumer warpgroup
// per 64 rows, all of a CTA's rows at once) and the weight rows its N side,
// so a tile can be any multiple of 16 weight rows wide and every CTA sums
// the whole of K itself. That removes what made short products slow there:
// no K split, no cluster, no fp32 tile staged and summed through distributed
// shared memory (a timing build put that epilogue at over half of the
// 0.5B q/k/v product's time). The price is that every CTA reads all of its
// input rows; linear_swiglu_plan's widths come from a sweep of all of them
// (their CTA counts and bytes alone did not rank them).
//
// A CTA's weight tile is `cols` gate rows followed by the same `cols` up
// rows: wgmma's accumulator layout gives a thread the same 2 columns of
// every 8-column block, so the thread that holds gate column c also holds up
// column c (block j + cols / 8), and SwiGLU is applied in registers. A
// producer warp asks TMA for each k-block's input, gate and up boxes into a
// ring of stages (full/empty mbarriers, as linear_multi.cu's TMA kernel);
// the consumers free a stage one k-block behind its products.
#include <algorithm>
#include <utility>

#include "common.cuh"
#include "dapo/ops/matmul.h"
#include "dapo/ops/plan/gemv_plan.h"
#include "dapo/ops/plan/swiglu_plan.h"
#include "dapo/ops/swiglu.h"
#include "ptx/mma_ptx.cuh"
#include "norm/norm_fold.cuh"
#include "ptx/pdl.cuh"
#include "gemm/swiglu_math.cuh"
#include "runtime/tma_map.h"
#include "ptx/tma_ptx.cuh"
#include "ptx/wgmma_ptx.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/gemm/gemv.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

constexpr int kBK = plan::kSwigluBK;  // k per stage: 128-byte rows, the swizzle's span

// COLS h columns (gate rows, then as many up rows) x 64 * CW input rows;
// DEEP: a ring of up to 160 KB for grids of at most one CTA an SM.
template <int COLS_, int CW_, bool DEEP_>
struct SwigluTile {
  static constexpr int COLS = COLS_;
  static constexpr int BN = 2 * COLS;  // weight rows: wgmma's N
  static constexpr int CW = CW_;       // consumer warpgroups
  static constexpr int BM = 64 * CW;
  static constexpr int kConsumerThreads = 128 * CW;
  // + the producer warp, and in a DEEP tile a warp that computes the rows'
  // rstd under a folded norm while the products run (loading them in the
  // consumers before their first product cost the 0.5B product 1.9 us at
  // 128 rows). Two CTAs an SM have no registers to spare for that warp
  // (1.5B decode step 2.65 -> 2.80 ms), and the producer warp's idle lanes
  // slow its TMA issue (2.65 -> 3.01): those tiles take no RowNorm (the
  // host applies it to the input first).
  static constexpr bool kRstdWarp = DEEP_;
  static constexpr int kThreads = kConsumerThreads + (kRstdWarp ? 64 : 32);
  static constexpr int kInBytes = BM * 128;
  static constexpr int kStageBytes = (BM + BN) * 128;
  // As many stages as fit in 112 KB (two CTAs an SM) or, DEEP, 160 KB (one:
  // more bytes in flight), 2 to 8.
  static constexpr int STAGES = std::clamp((DEEP_ ? 160 : 112) * 1024 / kStageBytes, 2, 8);
  static constexpr int kBarrierOffset = STAGES * kStageBytes;
  // Each input row's rstd under a folded norm, after the barriers.
  static constexpr int kRstdOffset = kBarrierOffset + 16 * STAGES;
  static constexpr int kSmem = kRstdOffset + BM * 4;
  // 1024-byte aligned boxes (the swizzle keys on address bits 7-9).
  static_assert(COLS % 8 == 0 && BN <= 256, "tiles of 8k h columns, at most 128");
};

struct SwigluArgs {
  bf16_t* h;  // (M, I)
  int32_t M, I, m_tiles, k_blocks;
  int8_t pair_store;  // two adjacent h values go as one 4-byte store
  RowNormArgs rn;  // a folded norm of the input rows (norm_fold.h); rn.ssq null: none
};

// The boxes: input rows (M x K in boxes of 64 x BM), gate and up (I x K in
// boxes of 64 x COLS).
struct SwigluMaps {
  CUtensorMap in, gate, up;
};

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    linear_swiglu_kernel(const __grid_constant__ SwigluArgs a, const __grid_constant__ SwigluMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // The m-tiles of one weight tile are consecutive CTAs: the later ones read
  // it from L2.
  const int mt = int(blockIdx.x) % a.m_tiles, tile = int(blockIdx.x) / a.m_tiles;
  const int m0 = mt * C::BM, j0 = tile * C::COLS;
  const uint32_t full = sbase + C::kBarrierOffset, empty = full + 8 * C::STAGES;
  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, C::CW);  // one arrival per consumer warpgroup
    }
    mbar_init_fence();
  }
  __syncthreads();
  // Programmatic dependent launch: the input comes from the previous kernel.
  pdl_wait();
  pdl_launch_dependents();
  const int nkb = a.k_blocks;

  if (warp == 4 * C::CW) {
    // Producer: one thread, every k-block, as soon as its stage is free.
    if (lane == 0) {
      for (int i = 0; i < nkb; ++i) {
        const int slot = i % C::STAGES;
        if (i >= C::STAGES) mbar_wait(empty + 8 * slot, uint32_t((i / C::STAGES - 1) & 1));
        const uint32_t sw = sbase + uint32_t(slot * C::kStageBytes), bar = full + 8 * slot;
        mbar_arrive_expect_tx(bar, uint32_t(C::kStageBytes));
        const int k = i * kBK;
        tma_load_2d(sw, &maps.in, k, m0, bar);
        tma_load_2d(sw + C::kInBytes, &maps.gate, k, j0, bar);
        tma_load_2d(sw + C::kInBytes + C::COLS * 128, &maps.up, k, j0, bar);
      }
    }
    return;  // the consumers wait for every box it asked for
  }
  // Compiled into the DEEP tiles only: in the others the RowNorm code alone
  // (never run there) took the 1.5B gate/up tile from 66 to 109 registers
  // and its decode step's products from 662 to 784 us (H100).
  if (C::kRstdWarp && warp == 4 * C::CW + 1) {
    if (a.rn.ssq != nullptr) {
      float* rstd_s = reinterpret_cast<float*>(smem + C::kRstdOffset);
      const int toks = min(C::BM, a.M - m0);
#pragma unroll 4
      for (int t = lane; t < toks; t += 32)
        rstd_s[t] = row_rstd(a.rn, m0 + t);
      named_barrier_arrive(1, C::kConsumerThreads + 32);  // the consumers read them after their products
    }
    return;
  }

  // Consumers: warpgroup g multiplies input rows 64g.. by every weight row
  // of the tile, one k-block of products in flight.
  const int wg = warp >> 2;
  const uint32_t a_off = uint32_t(wg * 64 * 128);
  float acc[C::BN / 8][4];
#pragma unroll
  for (int j = 0; j < C::BN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  for (int i = 0; i < nkb; ++i) {
    const int slot = i % C::STAGES;
    mbar_wait(full + 8 * slot, uint32_t((i / C::STAGES) & 1));
    const uint32_t sw = sbase + uint32_t(slot * C::kStageBytes), sb = sw + C::kInBytes;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks)
      wgmma_m64nk16<C::BN>(acc, wgmma_desc_sw128(sw + a_off + ks * 32), wgmma_desc_sw128(sb + ks * 32));
    wgmma_commit();
    wgmma_wait<1>();
    if (i > 0 && (tid & 127) == 0) mbar_arrive(empty + 8 * ((i - 1) % C::STAGES));
  }
  wgmma_wait<0>();
  float rs[2] = {1.0f, 1.0f};
  if (C::kRstdWarp && a.rn.ssq != nullptr) {
    named_barrier_sync(1, C::kConsumerThreads + 32);
    const float* rstd_s = reinterpret_cast<const float*>(smem + C::kRstdOffset);
    const int r0 = wg * 64 + (warp & 3) * 16 + (lane >> 2);
    rs[0] = rstd_s[r0];
    rs[1] = rstd_s[r0 + 8];
  }

  // acc[j] holds h columns j0 + 8j + 2 (lane % 4) + {0, 1} of gate (j <
  // COLS / 8) or up (the rest), rows 16 (warp % 4) + lane / 4 (+ 8). Each
  // product is rounded to bf16 as the unfused path stores it, then
  // swiglu_forward's arithmetic.
  constexpr int kHalf = C::COLS / 8;
  const int row = m0 + wg * 64 + (warp & 3) * 16 + (lane >> 2);
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    const int col = j0 + 8 * j + 2 * (lane & 3);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = row + 8 * half;
      if (m >= a.M || col >= a.I) continue;
      float o[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        // Under a folded norm the sums are scaled by the row's rstd first.
        const float g = __bfloat162float(__float2bfloat16_rn(acc[j][2 * half + e] * rs[half]));
        const float u = __bfloat162float(__float2bfloat16_rn(acc[j + kHalf][2 * half + e] * rs[half]));
        const float s = swiglu_sigmoid(g);
        o[e] = g * s * u;
      }
      bf16_t* dst = a.h + int64_t(m) * a.I + col;
      if (a.pair_store && col + 1 < a.I) {
        *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(o[0], o[1]);
      } else {
        dst[0] = __float2bfloat16_rn(o[0]);
        if (col + 1 < a.I) dst[1] = __float2bfloat16_rn(o[1]);
      }
    }
  }
#else
  __trap();  // not an sm_90a build: the host plans no fused launch
#endif
}

// ---- configurations --------------------------------------------------------------

#if defined(DAPO_CUDA_WGMMA)
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

// f(the tile of `cols` h columns and CW consumer warpgroups): one kernel
// per width of plan::kSwigluWidths (wgmma's N is twice that, 32 to 192),
// the widths the plans pick from.
template <bool DEEP, int CW, size_t... W, class F>
void with_width(int cols, F& f, std::index_sequence<W...>) {
  const bool found =
      ((cols == plan::kSwigluWidths[W] && (f(SwigluTile<plan::kSwigluWidths[W], CW, DEEP>{}), true)) || ...);
  if (!found) DAPO_FAIL("linear_swiglu: no tile of ", cols, " columns");
}

template <bool DEEP, class F>
void with_tile(int cols, int rows, F&& f) {
  constexpr auto widths = std::make_index_sequence<plan::kSwigluWidths.size()>{};
  if (rows == 64) return with_width<DEEP, 1>(cols, f, widths);
  if (rows == 128) return with_width<DEEP, 2>(cols, f, widths);
  DAPO_FAIL("linear_swiglu: no tile of ", rows, " input rows");
}

}  // namespace

namespace detail {

std::span<const int> linear_swiglu_widths() { return {plan::kSwigluWidths.data(), plan::kSwigluWidths.size()}; }

bool linear_swiglu_supported(const Tensor& h, const Tensor& in, const Tensor& w_gate, const Tensor& w_up) {
  if (!kBuilt) return false;
  if (in.dtype != DType::bf16 || h.dtype != DType::bf16 || w_gate.dtype != DType::bf16 || w_up.dtype != DType::bf16)
    return false;
  if (in.ndim != 2 || w_gate.ndim != 2) return false;
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  if (K < 1 || K % 8 != 0 || K > INT32_MAX || M > INT32_MAX || I > INT32_MAX) return false;
  return aligned16(in.data) && aligned16(w_gate.data) && aligned16(w_up.data) && aligned16(h.data);
}

bool linear_swiglu_preferred(int64_t M, int64_t K, int64_t I) { return plan::swiglu_fused_preferred(M, K, I); }

SwigluPlan linear_swiglu_plan(int64_t M, int64_t K, int64_t I) { return plan::swiglu_fused_plan(M, K, I, sm_count()); }

void linear_swiglu_fused(const Ctx& ctx, Tensor h, Tensor in, Tensor w_gate, Tensor w_up, const SwigluPlan* plan,
                         const RowNorm* rn) {
  DAPO_CHECK(linear_swiglu_supported(h, in, w_gate, w_up), "linear_swiglu_fused: the fused kernel cannot take in ",
             in.shape_string(), " (", dtype_name(in.dtype), ")");
  ops::detail::check_linear_swiglu(h, in, w_gate, w_up);
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  if (M == 0 || I == 0) return;
  const SwigluPlan p = plan != nullptr ? *plan : linear_swiglu_plan(M, K, I);
  // Tiles without the rstd warp (two CTAs an SM) get the rows normed first.
  if (rn != nullptr && rn->active() && !p.deep) {
    ops::detail::check_row_norm(*rn, M, K, "linear_swiglu_forward");  // row_norm_args' check for the deep tiles
    cuda::row_norm_apply(ctx, in, *rn);
    rn = nullptr;
  }
  auto launch = [&](auto t) {
    using C = decltype(t);
    SwigluArgs a{};
    a.h = static_cast<bf16_t*>(h.data);
    a.M = int32_t(M);
    a.I = int32_t(I);
    a.m_tiles = int32_t(ceil_div(M, C::BM));
    a.k_blocks = int32_t(ceil_div(K, kBK));
    a.pair_store = I % 2 == 0;
    a.rn = row_norm_args(ctx, rn, M, K, "linear_swiglu_forward");
    SwigluMaps maps{};
    maps.in = tma_box_map_bf16(in.data, M, K, C::BM);
    maps.gate = tma_box_map_bf16(w_gate.data, I, K, C::COLS);
    maps.up = tma_box_map_bf16(w_up.data, I, K, C::COLS);
    const int64_t grid = ceil_div(I, C::COLS) * a.m_tiles;
    DAPO_CHECK(grid <= INT32_MAX, "linear_swiglu: a grid of ", grid, " CTAs");
    const auto kernel = linear_swiglu_kernel<C>;
    DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    DAPO_CUDA_CHECK(launch_pdl(kernel, dim3(unsigned(grid)), dim3(C::kThreads), C::kSmem, stream_of(ctx), a, maps));
  };
  if (p.deep) with_tile<true>(p.cols, p.rows, launch);
  else with_tile<false>(p.cols, p.rows, launch);
}

}  // namespace detail

// The contract (shapes, dtypes, aliasing, the row norm) is checked by
// ops::linear_swiglu_forward; the kernels' limits choose the path.
void linear_swiglu_forward(const Ctx& ctx, Tensor h, Tensor gate, Tensor up, Tensor in, Tensor w_gate,
                           Tensor w_up, const RowNorm& rn) {
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  // Batch-invariant: the trainer's two ops (the invariant products into
  // gate and up, then SwiGLU), never a fused kernel.
  const bool fusable = !ctx.batch_invariant && detail::linear_swiglu_supported(h, in, w_gate, w_up);
  const bool gemv = !ctx.batch_invariant && detail::linear_swiglu_gemv_supported(h, in, w_gate, w_up) &&
                    plan::gemv_swiglu_preferred(M, K, I);
  if (!gemv && fusable && detail::linear_swiglu_preferred(M, K, I))
    return detail::linear_swiglu_fused(ctx, h, in, w_gate, w_up, nullptr, &rn);
  // The small-batch kernel, the wide kernel and the two ops take the rows
  // normed in place.
  if (rn.active()) cuda::row_norm_apply(ctx, in, rn);
  if (gemv) return detail::linear_swiglu_gemv(ctx, h, in, w_gate, w_up);
  if (fusable && detail::linear_swiglu_wide_preferred(M, K, I))
    return detail::linear_swiglu_wide(ctx, h, in, w_gate, w_up);
  const LinearSegment segs[] = {{gate, w_gate, Tensor{}}, {up, w_up, Tensor{}}};
  cuda::linear_forward_multi(ctx, in, segs);
  cuda::swiglu_forward(ctx, h, gate, up);
}

}  // namespace dapo::ops::cuda
