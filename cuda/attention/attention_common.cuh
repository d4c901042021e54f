// Private to attention_forward.cu and attention_backward.cu: the tensor-core
// building blocks of the FlashAttention-2-style kernels (mma.sync m16n8k16
// bf16 -> fp32, ldmatrix, cp.async into swizzled shared-memory tiles), the
// table that maps CTAs to (sequence, block) of a packed batch, and the
// kernel limits both directions check.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 * gr + tg.
//   A (16x16, row-major): a0 = (gr, 2tg..+1), a1 = (gr+8, 2tg..), a2 = (gr, 8+2tg..), a3 = (gr+8, 8+2tg..)
//   B (16x8, k x n):      b0 = (k 2tg..+1, n gr), b1 = (k 8+2tg..+1, n gr)
//   C (16x8, f32):        c0,c1 = (gr, 2tg..+1), c2,c3 = (gr+8, 2tg..+1)
// so the C fragments of two adjacent n-blocks are, once packed to bf16, the
// A fragment of the next product over that 16-wide dimension (P -> P V,
// dS -> dS K, ...): no round trip through shared memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "common.cuh"
#include "dapo/ops/attention.h"
#include "ptx/mma_ptx.cuh"

namespace dapo::ops::cuda::detail::attn {

using bf16_t = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;

// Threads of a CTA of NW warps: one count for the launch, the kernel's
// __launch_bounds__ and its tile loops (NT), in both directions.
template <int NW>
constexpr int kCtaThreads = NW * 32;

using cuda::detail::cp_async_16;
using cuda::detail::cp_async_4;
using cuda::detail::cp_async_commit;
using cuda::detail::cp_async_wait;
using cuda::detail::ldsm_x4;
using cuda::detail::ldsm_x4_t;
using cuda::detail::mma_bf16;
using cuda::detail::smem_u32;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) is the low half: the lower column
  return *reinterpret_cast<uint32_t*>(&v);
}

// 2^x; -inf gives +0, which is how masked scores vanish.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Tiles of ROWS x D bf16 in shared memory, row-major in 16-byte chunks with
// the chunk index XORed by (row & 7): the 8 row addresses of one ldmatrix
// 8x8 matrix (same logical chunk, consecutive rows) then fall in 8 distinct
// bank groups instead of one. Rows shorter than the 128 bytes of the banks
// (D = 32, 16) fill a bank line 8 / (D / 8) rows at a time, so the rows of
// one line already differ in bank group; the XOR takes the line index
// instead, masked below D / 8 so that a chunk stays inside its row.
template <int D>
__device__ __forceinline__ uint32_t chunk_offset(int row, int chunk) {
  constexpr int kChunks = D / 8;
  if constexpr (kChunks >= 8) {
    return uint32_t(row * kChunks + (chunk ^ (row & 7))) * 16u;
  } else {
    constexpr int kRowsPerLine = 8 / kChunks;
    return uint32_t(row * kChunks + (chunk ^ ((row / kRowsPerLine) & (kChunks - 1)))) * 16u;
  }
}

// Rows [0, rows_valid) of a tile from global memory (row stride `stride`
// elements), zeros beyond; all NT threads of the CTA take part.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile(uint32_t s, const bf16_t* g, int64_t stride, int rows_valid, int tid) {
  constexpr int kChunksPerRow = D / 8, kTotal = ROWS * kChunksPerRow;
  static_assert(kTotal % NT == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < kTotal / NT; ++i) {
    const int c = tid + i * NT, r = c / kChunksPerRow, ch = c % kChunksPerRow;
    const bool ok = r < rows_valid;
    cp_async_16(s + chunk_offset<D>(r, ch), g + (ok ? r * stride + ch * 8 : 0), ok);
  }
}

// A fragment of rows r0..r0+15, columns 16kc..16kc+15 of a row-major tile.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t s, int r0, int kc, int lane) {
  ldsm_x4(a, s + chunk_offset<D>(r0 + (lane & 15), kc * 2 + (lane >> 4)));
}
// B fragments of a product X Y^T where the tile holds Y row-major (n rows,
// k columns): n-rows n0..n0+15, k columns 16kc..16kc+15. b[0], b[1] serve
// n-block n0..n0+7 and b[2], b[3] n-block n0+8..n0+15.
template <int D>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], uint32_t s, int n0, int kc, int lane) {
  ldsm_x4(b, s + chunk_offset<D>(n0 + (lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1)));
}
// B fragments of a product X Y where the tile holds Y row-major (k rows, n
// columns): k-rows k0..k0+15, n columns 16np..16np+15. b[0], b[1] serve
// n-block 16np..+7 and b[2], b[3] n-block 16np+8..+15.
template <int D>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], uint32_t s, int k0, int np, int lane) {
  ldsm_x4_t(b, s + chunk_offset<D>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), np * 2 + (lane >> 4)));
}

// Packs the C fragments of n-blocks 2kc and 2kc+1 into the A fragment of the
// 16-wide k-chunk kc of the next product.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// Writes a warp's C fragments (rows r0..r0+15 of a ROWS x D tile, NDB
// n-blocks of 8 columns) as bf16 into a swizzled tile, for a coalesced copy out.
template <int D>
__device__ __forceinline__ void stage_rows(bf16_t* tile, int r0, const float (&c)[D / 8][4], int lane) {
#pragma unroll
  for (int db = 0; db < D / 8; ++db)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + (lane >> 2) + half * 8;
      char* p = reinterpret_cast<char*>(tile) + chunk_offset<D>(r, db) + (lane & 3) * 4;
      *reinterpret_cast<uint32_t*>(p) = pack_bf16(c[db][2 * half], c[db][2 * half + 1]);
    }
}

// Copies rows [0, rows_valid) of a staged tile to global memory, 16 bytes a thread.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void store_tile(bf16_t* g, int64_t stride, const bf16_t* tile, int rows_valid, int tid) {
  constexpr int kChunksPerRow = D / 8;
  static_assert(ROWS * kChunksPerRow % NT == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < ROWS * kChunksPerRow / NT; ++i) {
    const int c = tid + i * NT, r = c / kChunksPerRow, ch = c % kChunksPerRow;
    if (r < rows_valid)
      *reinterpret_cast<uint4*>(g + r * stride + ch * 8) =
          *reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(tile) + chunk_offset<D>(r, ch));
  }
}

// The work list of a launch over a packed batch: entry e = (sequence b,
// block index) of `block` rows. Sequences come longest first (ties by
// index), so that the CTAs with the most work start first and short ones
// fill the tail; within a sequence the blocks run heaviest first:
// last_first for query blocks (the last sees the most keys), first-first
// for key blocks (the first is seen by the most queries). Entries past the
// real work are (-1, -1) and their CTAs return at once. A sequence outside
// [0, T] (malformed cu_seqlens) gets no entries: its rows stay unwritten.
// One CTA, O(B^2 / threads): B is the number of packed sequences (tens to
// hundreds). Defined in attention_forward.cu, used by both directions.
cudaError_t launch_build_tile_table(int2* tiles, const int32_t* cu, int B, int T, int block, int n_entries,
                                    bool last_first, cudaStream_t stream);

// Sizes the table: sum_b ceil(len_b / block) <= T / block + B.
inline int tile_table_entries(int64_t T, int64_t B, int block) { return int(T / block + B); }

// Shapes of a call (its contract checked by ops::attention_forward / _backward).
struct Dims {
  int64_t T, Hq, Hkv, D, B, group;
};

// The kernels' own limits, shared by both directions: bf16 tensors (q's
// dtype is every tensor's but lse's), D in {16, 32, 64, 128}, a work table
// within the grid; returns the sizes.
inline Dims check_kernel_limits(const char* op, const Tensor& q, const Tensor& k, const Tensor& cu_seqlens) {
  const Dims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], cu_seqlens.shape[0] - 1, q.shape[1] / k.shape[1]};
  DAPO_CHECK(q.dtype == DType::bf16, op, " on CUDA: q is ", dtype_name(q.dtype), ", expected bf16");
  DAPO_CHECK(d.D == 16 || d.D == 32 || d.D == 64 || d.D == 128, op, ": head dim ", d.D,
             " on CUDA (kernels exist for 16, 32, 64 and 128)");
  // The grid's y dimension is the work table (tile_table_entries, blocks of >= 64 rows).
  DAPO_CHECK(d.T / 64 + d.B <= 65535 && d.T * d.Hq < (int64_t(1) << 31), op, ": T = ", d.T, ", B = ", d.B,
             " is beyond the kernels' grid");
  return d;
}

// Rows are read and written as 16-byte chunks.
inline void check_aligned(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  for (const auto& [t, name] : tensors)
    DAPO_CHECK(reinterpret_cast<uintptr_t>(t->data) % 16 == 0, op, " on CUDA: ", name, " is not 16-byte aligned");
}

}  // namespace dapo::ops::cuda::detail::attn
