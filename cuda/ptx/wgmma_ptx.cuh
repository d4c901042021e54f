// PTX wrappers for Hopper's warpgroup MMA (wgmma, sm_90a only): shared-memory
// matrix descriptors for K-major tiles in the 128-byte swizzle, the fences
// and the bf16 m64nNk16 products with fp32 accumulators, every width the
// kernels issue in one place. Compiled only where __CUDA_ARCH_FEAT_SM90_ALL is
// defined (an sm_90a target); elsewhere the kernels that would use them are
// not built (DAPO_CUDA_WGMMA, CMakeLists.txt).
//
// The tile layout they expect is the one mma_ptx.cuh's users already write:
// rows of 64 bf16 (128 bytes) whose 16-byte chunk c sits at c ^ (row & 7),
// 8-row groups 1024 bytes apart, every tile 1024-byte aligned: the
// hardware's 128-byte swizzle, which it applies to absolute address bits, so
// a k16 step inside a row is the start address plus 32 bytes.
#pragma once

#include <cstdint>

namespace dapo::ops::cuda::detail {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Descriptor of a K-major bf16 tile at shared address `addr` (128-byte
// swizzle): start address >> 4 in bits 0-13, the leading-dimension offset
// (unused by swizzled K-major tiles; 1 by convention) in 16-29, the stride
// between 8-row groups (1024 bytes) >> 4 in 32-45, swizzle mode 1 (128 B) in
// 62-63.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Registers read or written by wgmma since the last fence must be fenced
// before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written by ordinary stores or cp.async becomes visible to the
// async proxy (wgmma's operand reads): in every writing thread, before the
// barrier that precedes the wgmma.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The products d (64 x N, fp32) += A (64 x 16) * B (N x 16)^T, both K-major
// bf16 in shared memory, for the widths the kernels use: the skinny GEMM
// (linear_multi.cu, lm_head_sample.cu) puts 64, 128 or 256 input rows on N,
// the rows-major fused products (linear_swiglu.cu, linear_swiglu_wide.cu) a
// tile's weight rows. d[j] holds columns 8j..8j+7 in the m16n8 C layout of
// the thread's warp (rows 16 * warp + lane / 4 and + 8).
//
// Inline PTX takes a literal operand list, so the N / 2 accumulators are
// spelled out by macros: DAPO_WGMMA_D<k>(r) names rows r..r+k-1 of d as "+f"
// operands, DAPO_WGMMA_R<n> is the text of the first n placeholders, and
// DAPO_WGMMA_BF16 writes one width's wrapper, whose descriptors and scale-d
// predicate take the three placeholders after the accumulators.
#define DAPO_WGMMA_D2(r)                                                                                  \
  "+f"(d[r][0]), "+f"(d[r][1]), "+f"(d[r][2]), "+f"(d[r][3]), "+f"(d[r + 1][0]), "+f"(d[r + 1][1]), \
      "+f"(d[r + 1][2]), "+f"(d[r + 1][3])
#define DAPO_WGMMA_D4(r) DAPO_WGMMA_D2(r), DAPO_WGMMA_D2(r + 2)
#define DAPO_WGMMA_D8(r) DAPO_WGMMA_D4(r), DAPO_WGMMA_D4(r + 4)
#define DAPO_WGMMA_D16(r) DAPO_WGMMA_D8(r), DAPO_WGMMA_D8(r + 8)
#define DAPO_WGMMA_R8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define DAPO_WGMMA_R16 DAPO_WGMMA_R8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define DAPO_WGMMA_R24 DAPO_WGMMA_R16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define DAPO_WGMMA_R32 DAPO_WGMMA_R24 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define DAPO_WGMMA_R40 DAPO_WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define DAPO_WGMMA_R48 DAPO_WGMMA_R40 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define DAPO_WGMMA_R56 DAPO_WGMMA_R48 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define DAPO_WGMMA_R64 DAPO_WGMMA_R56 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define DAPO_WGMMA_R72 DAPO_WGMMA_R64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define DAPO_WGMMA_R80 DAPO_WGMMA_R72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define DAPO_WGMMA_R88 DAPO_WGMMA_R80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define DAPO_WGMMA_R96 DAPO_WGMMA_R88 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define DAPO_WGMMA_R104 DAPO_WGMMA_R96 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define DAPO_WGMMA_R112 DAPO_WGMMA_R104 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define DAPO_WGMMA_R120 DAPO_WGMMA_R112 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define DAPO_WGMMA_R128 DAPO_WGMMA_R120 ", %120, %121, %122, %123, %124, %125, %126, %127"
#define DAPO_WGMMA_BF16(n, rows, ia, ib, ip, regs, ...)                                               \
  __device__ __forceinline__ void wgmma_m64n##n##k16(float (&d)[rows][4], uint64_t a, uint64_t b) {  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #ip ", 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.bf16.bf16 {" regs "}, %" #ia ", %" #ib \
                 ", p, 1, 1, 0, 0;\n}\n"                                                                 \
                 : __VA_ARGS__                                                                        \
                 : "l"(a), "l"(b), "n"(1));                                                           \
  }
DAPO_WGMMA_BF16(32, 4, 16, 17, 18, DAPO_WGMMA_R16, DAPO_WGMMA_D4(0))
DAPO_WGMMA_BF16(48, 6, 24, 25, 26, DAPO_WGMMA_R24, DAPO_WGMMA_D4(0), DAPO_WGMMA_D2(4))
DAPO_WGMMA_BF16(64, 8, 32, 33, 34, DAPO_WGMMA_R32, DAPO_WGMMA_D8(0))
DAPO_WGMMA_BF16(80, 10, 40, 41, 42, DAPO_WGMMA_R40, DAPO_WGMMA_D8(0), DAPO_WGMMA_D2(8))
DAPO_WGMMA_BF16(96, 12, 48, 49, 50, DAPO_WGMMA_R48, DAPO_WGMMA_D8(0), DAPO_WGMMA_D4(8))
DAPO_WGMMA_BF16(128, 16, 64, 65, 66, DAPO_WGMMA_R64, DAPO_WGMMA_D16(0))
DAPO_WGMMA_BF16(160, 20, 80, 81, 82, DAPO_WGMMA_R80, DAPO_WGMMA_D16(0), DAPO_WGMMA_D4(16))
DAPO_WGMMA_BF16(192, 24, 96, 97, 98, DAPO_WGMMA_R96, DAPO_WGMMA_D16(0), DAPO_WGMMA_D8(16))
DAPO_WGMMA_BF16(256, 32, 128, 129, 130, DAPO_WGMMA_R128, DAPO_WGMMA_D16(0), DAPO_WGMMA_D16(16))
#undef DAPO_WGMMA_BF16
#undef DAPO_WGMMA_R8
#undef DAPO_WGMMA_R16
#undef DAPO_WGMMA_R24
#undef DAPO_WGMMA_R32
#undef DAPO_WGMMA_R40
#undef DAPO_WGMMA_R48
#undef DAPO_WGMMA_R56
#undef DAPO_WGMMA_R64
#undef DAPO_WGMMA_R72
#undef DAPO_WGMMA_R80
#undef DAPO_WGMMA_R88
#undef DAPO_WGMMA_R96
#undef DAPO_WGMMA_R104
#undef DAPO_WGMMA_R112
#undef DAPO_WGMMA_R120
#undef DAPO_WGMMA_R128
#undef DAPO_WGMMA_D16
#undef DAPO_WGMMA_D8
#undef DAPO_WGMMA_D4
#undef DAPO_WGMMA_D2

// d (64 x N) += A (64 x 16) * B (N x 16)^T for any width above.
template <int N>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[N / 8][4], uint64_t a, uint64_t b) {
  if constexpr (N == 32) wgmma_m64n32k16(d, a, b);
  else if constexpr (N == 48) wgmma_m64n48k16(d, a, b);
  else if constexpr (N == 64) wgmma_m64n64k16(d, a, b);
  else if constexpr (N == 80) wgmma_m64n80k16(d, a, b);
  else if constexpr (N == 96) wgmma_m64n96k16(d, a, b);
  else if constexpr (N == 128) wgmma_m64n128k16(d, a, b);
  else if constexpr (N == 160) wgmma_m64n160k16(d, a, b);
  else if constexpr (N == 192) wgmma_m64n192k16(d, a, b);
  else if constexpr (N == 256) wgmma_m64n256k16(d, a, b);
  else static_assert(N == 32, "no wgmma wrapper for this width");
}
// The skinny GEMM's product for a tile of BM (64, 128 or 256) input rows.
template <int BM>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[BM / 8][4], uint64_t a, uint64_t b) {
  static_assert(BM == 64 || BM == 128 || BM == 256, "wgmma tiles of 64, 128 or 256 input rows");
  wgmma_m64nk16<BM>(d, a, b);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace dapo::ops::cuda::detail
