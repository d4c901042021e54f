// The RoPE rotation shared by rope.cu and rope_kv_write.cu, so that the fused
// decode op gives exactly rope_forward's bits: the same host inv_freq, the
// same fp32 angle (one product, precise sincosf) and the same explicitly
// rounded products and sums (rope.h's recipe).
//
// Work split: one thread per (token, K consecutive pairs, kRopeHeadsInFlight
// heads); it computes its K angles once and rotates them in its heads,
// moving packs of both halves.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "ptx/pack.cuh"

namespace dapo::ops::cuda::detail {

constexpr int kRopeMaxHalf = 256;  // D <= 512
constexpr int kRopeHeadsInFlight = 4;
// Threads of a CTA of rope.cu's and rope_kv_write.cu's kernels, which loop
// grid-stride over their work.
constexpr int kRopeThreads = 256;

struct RopeInvFreq {
  float v[kRopeMaxHalf];
};

// Exactly the CPU reference's fp32 inv_freq (src/ops/cpu/rope.cpp): a 1-ulp
// difference in inv_freq moves the angle at position 32k by ~2e-3 rad.
inline RopeInvFreq rope_inv_freq(float theta, int64_t D) {
  RopeInvFreq f{};
  for (int64_t i = 0; i < D / 2; ++i) f.v[i] = 1.0f / std::pow(theta, float(2 * i) / float(D));
  return f;
}

// Head chunks of H heads, kRopeHeadsInFlight at a time.
__host__ __device__ __forceinline__ int rope_chunks(int64_t H) {
  return int((H + kRopeHeadsInFlight - 1) / kRopeHeadsInFlight);
}

// cos and sign * sin of the K angles of pairs i0..i0+K-1 at position p: the
// precise sincosf (not __sinf/__cosf: angles reach tens of thousands of rad).
template <int K>
__device__ __forceinline__ void rope_angles(int32_t position, const RopeInvFreq& inv_freq, int i0, float sign,
                                            float (&c)[K], float (&s)[K]) {
  const float p = float(position);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    sincosf(p * inv_freq.v[i0 + k], &s[k], &c[k]);
    s[k] *= sign;
  }
}

// Rotates pairs i0..i0+K-1 of `heads` (<= kRopeHeadsInFlight) consecutive
// heads of D elements starting at in / out (each element read and written
// by this thread only, so out may be in). Where copy is not null the rotated
// values are also stored there, at the same offsets.
template <class T, int K>
__device__ __forceinline__ void rope_rotate_heads(T* out, const T* in, T* copy, int heads, int D, int i0,
                                                  const float (&c)[K], const float (&s)[K]) {
  const int half = D / 2;
  Pack<T, K> x1[kRopeHeadsInFlight], x2[kRopeHeadsInFlight];
#pragma unroll
  for (int j = 0; j < kRopeHeadsInFlight; ++j) {
    if (j >= heads) break;
    x1[j] = load_pack<T, K>(in + j * D + i0);
    x2[j] = load_pack<T, K>(in + j * D + i0 + half);
  }
#pragma unroll
  for (int j = 0; j < kRopeHeadsInFlight; ++j) {
    if (j >= heads) break;
    Pack<T, K> y1, y2;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float a = widen(x1[j].v[k]), b = widen(x2[j].v[k]);
      // Explicit roundings: no FMA contraction, as the CPU's x*cos + rotate_half(x)*sin.
      y1.v[k] = narrow<T>(__fadd_rn(__fmul_rn(a, c[k]), __fmul_rn(-b, s[k])));
      y2.v[k] = narrow<T>(__fadd_rn(__fmul_rn(b, c[k]), __fmul_rn(a, s[k])));
    }
    store_pack(out + j * D + i0, y1);
    store_pack(out + j * D + i0 + half, y2);
    if (copy != nullptr) {
      store_pack(copy + j * D + i0, y1);
      store_pack(copy + j * D + i0 + half, y2);
    }
  }
}

// The pack width for T tokens of H heads (or the heads of several tensors
// together, H their sum of chunk counts times kRopeHeadsInFlight): 16 bytes
// when the tokens alone fill the GPU (~64k threads, training), else 2, as
// the precise sincosf of a large angle is a long serial path and a decode
// step's few tokens need many threads sharing the angles; 1 where D / 2 or
// the alignment allows nothing wider (`aligned_to` is the byte alignment
// every pointer involved has).
template <class T>
inline int rope_pack_width(int64_t threads_at_wide_pack, int64_t D, uintptr_t aligned_to) {
  constexpr int kWide = kWidePack<T>;
  if ((D / 2) % kWide == 0 && aligned_to % 16 == 0 && threads_at_wide_pack >= (int64_t(1) << 16)) return kWide;
  if ((D / 2) % 2 == 0 && aligned_to % (2 * sizeof(T)) == 0) return 2;
  return 1;
}

// The largest power of two (up to 16) dividing every address: the alignment
// rope_pack_width needs.
inline uintptr_t common_alignment(std::initializer_list<const void*> ptrs) {
  uintptr_t bits = 16;
  for (const void* p : ptrs) bits |= reinterpret_cast<uintptr_t>(p);
  return bits & (~bits + 1);
}

}  // namespace dapo::ops::cuda::detail
