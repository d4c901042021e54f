// CUDA fused gate/up products and SwiGLU for many rows (matmul.h):
// a generation prefill's MLP up to the down projection, where the products
// are bound by the tensor cores, not by reading the weights.
//
// Unfused, the prefill writes gate and up (M x 2I bf16) from cuBLASLt and
// reads them back in swiglu_forward, which writes h: at the Qwen2.5-0.5B
// fixed load (32,768 rows) ~1 GB a layer through HBM, 7.4 ms of a 50 ms
// prefill on an H100. Here SwiGLU is the products' epilogue and only h
// reaches memory.
//
// A persistent kernel, one CTA an SM: a CTA's item is BM = 128 input rows x
// 128 h columns, i.e. 128 gate rows followed by the same 128 up rows as
// wgmma's N = 256 side, all of K. One producer thread streams every item's
// k-blocks (input box, gate box, up box) through a ring of 3 stages of
// 48 KB (TMA, full/empty mbarriers), running ahead into the next item;
// two consumer warpgroups multiply 64 input rows each (wgmma m64n256k16,
// fp32 accumulators), round the products to bf16 into a staging tile (gate
// and up, 64 KB) and go on to the next item. Three epilogue warps apply
// SwiGLU to the staged tile and send h out by TMA store while the next
// item's products run. Done by the consumers themselves, the epilogue left
// the tensor cores idle: H100, 0.5B at 32,768 rows, 1,174 us a call with it
// in the consumers' registers (h by TMA store), against 755 without any
// epilogue (an experiment) and 818 now.
//
// Items go m-tile-major (consecutive items share their input rows, which
// then come from L2); the weights must stay in L2 for this to pay
// (linear_swiglu_wide_preferred). Every output is one fixed-order fp32 sum
// over K rounded once per product: the same call on the same GPU gives the
// same bits.
#include <algorithm>

#include "common.cuh"
#include "dapo/ops/matmul.h"
#include "dapo/ops/plan/swiglu_plan.h"
#include "ptx/mma_ptx.cuh"
#include "norm/norm_fold.cuh"
#include "ptx/pdl.cuh"
#include "gemm/swiglu_math.cuh"
#include "runtime/tma_map.h"
#include "ptx/tma_ptx.cuh"
#include "ptx/wgmma_ptx.cuh"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

constexpr int kBK = plan::kSwigluBK;         // k per stage: 128-byte rows, the swizzle's span
constexpr int kBM = plan::kSwigluWideRows;   // input rows an item: two consumer warpgroups of 64
constexpr int kCols = plan::kSwigluWideCols;  // h columns an item
constexpr int kBN = 2 * kCols;
constexpr int kStages = 3;
constexpr int kInBytes = kBM * 128;     // 16 KB
constexpr int kBoxBytes = kCols * 128;  // a gate or an up box: 16 KB
constexpr int kStageBytes = kInBytes + 2 * kBoxBytes;
// The item's products rounded to bf16, gate then up (128 rows x 128 columns
// each), as two boxes of 64 columns in the 128-byte swizzle; h overwrites
// the gate tile and leaves from there by TMA store.
constexpr int kHalfBoxBytes = kBM * 128;  // 128 rows x 64 columns
constexpr int kTileBytes = 2 * kHalfBoxBytes;
constexpr int kGateOffset = kStages * kStageBytes;
constexpr int kUpOffset = kGateOffset + kTileBytes;
constexpr int kBarrierOffset = kUpOffset + kTileBytes;
constexpr int kSmem = kBarrierOffset + 16 * kStages;
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 128;  // + the producer warp and three epilogue warps
constexpr int kEpilogueThreads = 96;
// Named barriers between the consumers and the epilogue warps (0 is
// __syncthreads'): the staging tiles are free to write; they hold an item.
constexpr int kBarFree = 1, kBarStaged = 2, kBarEpilogue = 3;
static_assert(kSmem <= 227 * 1024, "an H100 CTA has at most 227 KB of shared memory");
static_assert(kBM == 128 && kCols == 128 && kBK == 64, "the staging and swizzle offsets below are for 128 x 128 items");

struct WideArgs {
  bf16_t* h;  // (M, I)
  int32_t M, I, k_blocks, n_tiles, items;
  int8_t tma_store;  // h rows are 16-byte multiples: the tile leaves by TMA
};

struct WideMaps {
  CUtensorMap in, gate, up, h;
};

// Byte offset of (row r, column c) in a staged 128 x 128 tile: box c / 64,
// its 16-byte chunk (c % 64) / 8 of the row at chunk ^ (r % 8) (the 128-byte
// swizzle), then (c % 8) * 2 bytes.
__device__ __forceinline__ uint32_t staged_offset(int r, int c) {
  return uint32_t((c >> 6) * kHalfBoxBytes + r * 128 + ((((c & 63) >> 3) ^ (r & 7)) << 4) + (c & 7) * 2);
}
// 16-byte chunk q (of 2,048) of a staged tile in memory order: its row and
// first column, and its offset.
__device__ __forceinline__ uint32_t chunk_offset(int q, int& row, int& col) {
  row = (q >> 3) & 127;
  col = (q >> 10) * 64 + (q & 7) * 8;
  return staged_offset(row, col);
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
// swiglu_forward's arithmetic on one pair of bf16 gate and up values.
__device__ __forceinline__ uint32_t swiglu_pair(uint32_t g2, uint32_t u2) {
  const float g0 = bf16_lo(g2), g1 = bf16_hi(g2);
  const float s0 = swiglu_sigmoid(g0), s1 = swiglu_sigmoid(g1);
  const __nv_bfloat162 h = __floats2bfloat162_rn(g0 * s0 * bf16_lo(u2), g1 * s1 * bf16_hi(u2));
  return *reinterpret_cast<const uint32_t*>(&h);
}

__global__ void __launch_bounds__(kThreads, 1)
    linear_swiglu_wide_kernel(const __grid_constant__ WideArgs a, const __grid_constant__ WideMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t sbase = smem_u32(smem);
  const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const uint32_t full = sbase + kBarrierOffset, empty = full + 8 * kStages;
  const uint32_t gate_s = sbase + kGateOffset, up_s = sbase + kUpOffset;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 2);  // one arrival per consumer warpgroup
    }
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // the input comes from the previous kernel
  pdl_launch_dependents();
  const int nkb = a.k_blocks;

  if (tid == kConsumerThreads) {
    // Producer: one thread, every item's k-blocks in order, each as soon as
    // its stage is free; it runs into the next item during the epilogue.
    int it = 0;
    for (int item = int(blockIdx.x); item < a.items; item += int(gridDim.x)) {
      const int m0 = (item / a.n_tiles) * kBM, j0 = (item % a.n_tiles) * kCols;
      for (int kb = 0; kb < nkb; ++kb, ++it) {
        const int slot = it % kStages;
        if (it >= kStages) mbar_wait(empty + 8 * slot, uint32_t((it / kStages - 1) & 1));
        const uint32_t sw = sbase + uint32_t(slot * kStageBytes), bar = full + 8 * slot;
        mbar_arrive_expect_tx(bar, uint32_t(kStageBytes));
        const int k = kb * kBK;
        tma_load_2d(sw, &maps.in, k, m0, bar);
        tma_load_2d(sw + kInBytes, &maps.gate, k, j0, bar);
        tma_load_2d(sw + kInBytes + kBoxBytes, &maps.up, k, j0, bar);
      }
    }
    return;  // the consumers wait for every box it asked for
  }
  if (warp > kConsumerThreads / 32) {
    // Epilogue warps: SwiGLU of each staged item, 16 bytes (8 columns) of
    // gate and up at a time, h over the gate tile, then out by TMA store
    // while the consumers multiply the next item.
    const int t = tid - kConsumerThreads - 32;
    for (int item = int(blockIdx.x); item < a.items; item += int(gridDim.x)) {
      const int m0 = (item / a.n_tiles) * kBM, j0 = (item % a.n_tiles) * kCols;
      named_barrier_arrive(kBarFree, kConsumerThreads + kEpilogueThreads);
      named_barrier_sync(kBarStaged, kConsumerThreads + kEpilogueThreads);
#pragma unroll 4
      for (int q = t; q < 2 * kBM * 8; q += kEpilogueThreads) {
        int r, c;
        const uint32_t off = chunk_offset(q, r, c);
        const uint4 g = *reinterpret_cast<const uint4*>(smem + kGateOffset + off);
        const uint4 u = *reinterpret_cast<const uint4*>(smem + kUpOffset + off);
        const uint4 h = make_uint4(swiglu_pair(g.x, u.x), swiglu_pair(g.y, u.y), swiglu_pair(g.z, u.z),
                                   swiglu_pair(g.w, u.w));
        if (a.tma_store) {
          *reinterpret_cast<uint4*>(smem + kGateOffset + off) = h;
          continue;
        }
        const int m = m0 + r;
        if (m >= a.M) continue;
        const uint32_t hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int col = j0 + c + e;
          if (col < a.I) {
            const uint16_t v = uint16_t(e % 2 == 0 ? hw[e / 2] & 0xFFFFu : hw[e / 2] >> 16);
            a.h[int64_t(m) * a.I + col] = __ushort_as_bfloat16(v);
          }
        }
      }
      if (a.tma_store) {
        // h becomes visible to the async proxy; one thread sends both boxes
        // (rows and columns past h are not written) and waits until they
        // have been read before the staging tiles are handed back.
        fence_proxy_async_smem();
        named_barrier_sync(kBarEpilogue, kEpilogueThreads);
        if (t == 0) {
          tma_store_2d(&maps.h, j0, m0, gate_s);
          tma_store_2d(&maps.h, j0 + 64, m0, gate_s + kHalfBoxBytes);
          bulk_commit();
          bulk_wait_read<0>();
        }
      }
    }
    if (a.tma_store && t == 0) bulk_wait<0>();  // h is written before the grid completes
    return;
  }
  if (warp >= kConsumerThreads / 32) return;  // the producer warp's other lanes

  // Consumers: warpgroup g multiplies input rows 64 g.. of the item by its
  // 256 weight rows; a stage is released one k-block behind its products.
  const int wg = warp >> 2;
  const uint32_t a_off = uint32_t(wg * 64 * 128);
  int it = 0;
  for (int item = int(blockIdx.x); item < a.items; item += int(gridDim.x)) {
    float acc[kBN / 8][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    for (int kb = 0; kb < nkb; ++kb, ++it) {
      const int slot = it % kStages;
      mbar_wait(full + 8 * slot, uint32_t((it / kStages) & 1));
      const uint32_t sw = sbase + uint32_t(slot * kStageBytes), sb = sw + kInBytes;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 16; ++ks)
        wgmma_m64n256k16(acc, wgmma_desc_sw128(sw + a_off + ks * 32), wgmma_desc_sw128(sb + ks * 32));
      wgmma_commit();
      wgmma_wait<1>();
      if (kb > 0 && (tid & 127) == 0) mbar_arrive(empty + 8 * ((it - 1) % kStages));
    }
    wgmma_wait<0>();
    if ((tid & 127) == 0) mbar_arrive(empty + 8 * ((it - 1) % kStages));

    // acc[j] holds columns 8j + 2 (lane % 4) + {0, 1} of gate (j < 16) or
    // up (j >= 16), rows 16 (warp % 4) + lane / 4 (+ 8) of the warpgroup's
    // 64: each product rounded to bf16 (as the unfused path stores it) into
    // the staging tiles, once the epilogue warps are done with them.
    constexpr int kHalf = kCols / 8;
    const int r0 = wg * 64 + (warp & 3) * 16 + (lane >> 2);
    named_barrier_sync(kBarFree, kConsumerThreads + kEpilogueThreads);
#pragma unroll
    for (int j = 0; j < kHalf; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r0 + 8 * half, c = 8 * j + 2 * (lane & 3);
        const uint32_t off = staged_offset(r, c);
        const __nv_bfloat162 g = __floats2bfloat162_rn(acc[j][2 * half], acc[j][2 * half + 1]);
        const __nv_bfloat162 u = __floats2bfloat162_rn(acc[j + kHalf][2 * half], acc[j + kHalf][2 * half + 1]);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(gate_s + off), "r"(*reinterpret_cast<const uint32_t*>(&g))
                     : "memory");
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(up_s + off), "r"(*reinterpret_cast<const uint32_t*>(&u))
                     : "memory");
      }
    named_barrier_arrive(kBarStaged, kConsumerThreads + kEpilogueThreads);
  }
#else
  __trap();  // not an sm_90a build: the host plans no wide launch
#endif
}

#if defined(DAPO_CUDA_WGMMA)
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

}  // namespace

namespace detail {

bool linear_swiglu_wide_preferred(int64_t M, int64_t K, int64_t I) {
  return plan::swiglu_wide_preferred(M, K, I, kBuilt);
}

void linear_swiglu_wide(const Ctx& ctx, Tensor h, Tensor in, Tensor w_gate, Tensor w_up) {
  DAPO_CHECK(linear_swiglu_supported(h, in, w_gate, w_up),
             "linear_swiglu_wide: the wide kernel cannot take in ", in.shape_string(), " (", dtype_name(in.dtype),
             ")");
  ops::detail::check_linear_swiglu(h, in, w_gate, w_up);
  const int64_t M = in.shape[0], K = in.shape[1], I = w_gate.shape[0];
  if (M == 0 || I == 0) return;
  WideArgs a{};
  a.h = static_cast<bf16_t*>(h.data);
  a.M = int32_t(M);
  a.I = int32_t(I);
  a.k_blocks = int32_t(ceil_div(K, kBK));
  a.n_tiles = int32_t(ceil_div(I, kCols));
  const int64_t items = ceil_div(M, kBM) * a.n_tiles;
  DAPO_CHECK(items <= INT32_MAX, "linear_swiglu_wide: ", items, " items");
  a.items = int32_t(items);
  a.tma_store = I % 8 == 0;  // h's base is 16-byte aligned (supported)
  WideMaps maps{};
  maps.in = tma_box_map_bf16(in.data, M, K, kBM);
  maps.gate = tma_box_map_bf16(w_gate.data, I, K, kCols);
  maps.up = tma_box_map_bf16(w_up.data, I, K, kCols);
  if (a.tma_store) maps.h = tma_box_map_bf16(h.data, M, I, kBM);
  const auto kernel = linear_swiglu_wide_kernel;
  DAPO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  // Persistent: one CTA an SM, every CTA taking items grid-strided.
  const int64_t grid = std::min<int64_t>(sm_count(), items);
  DAPO_CUDA_CHECK(launch_pdl(kernel, dim3(unsigned(grid)), dim3(kThreads), kSmem, stream_of(ctx), a, maps));
}

}  // namespace detail

}  // namespace dapo::ops::cuda
