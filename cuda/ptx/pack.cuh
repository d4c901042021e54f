// Packs of K consecutive elements moved by one load or store: the
// memory-bound ops (embedding, rmsnorm, residual_rmsnorm, rope) read 16 bytes
// per thread access (8 bf16 or 4 f32: one LDG.128) where the row length and
// the pointers allow it (cuda::detail::aligned16), and fall back to K = 1
// elsewhere.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "dapo/core/tensor.h"

namespace dapo::ops::cuda::detail {

template <class T, int K>
struct alignas(sizeof(T) * K) Pack {
  T v[K];
};

template <class T, int K>
__device__ __forceinline__ Pack<T, K> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, K>*>(p);
}
template <class T, int K>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, K>& v) {
  *reinterpret_cast<Pack<T, K>*>(p) = v;
}

// fp32 math on either storage type; narrow() rounds to nearest even.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The elements in a 16-byte pack of T.
template <class T>
inline constexpr int kWidePack = int(16 / sizeof(T));

}  // namespace dapo::ops::cuda::detail
