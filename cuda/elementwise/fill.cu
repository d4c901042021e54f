// CUDA fill (include/dapo/ops/fill.h): one cudaMemsetAsync when every byte
// of the element's bits is the same, else a grid-stride kernel that stores
// the element replicated over 16 bytes, element by element at the edges.
#include <algorithm>
#include <cstring>

#include "common.cuh"
#include "dapo/ops/fill.h"
#include "cuda/cuda_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

constexpr int kThreads = 256;

// p[0, head) and p[head + 16 / sizeof(U) * n16, n) element by element,
// the n16 16-byte blocks between them as uint4 stores.
template <class U>
__global__ void __launch_bounds__(kThreads) fill_kernel(U* __restrict__ p, int64_t n, int64_t head, int64_t n16,
                                                        U v, uint4 v16) {
  constexpr int64_t per16 = 16 / sizeof(U);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  uint4* body = reinterpret_cast<uint4*>(p + head);
  for (int64_t k = tid; k < n16; k += stride) body[k] = v16;
  const int64_t tail = head + per16 * n16;
  for (int64_t i = tid; i < head; i += stride) p[i] = v;
  for (int64_t i = tail + tid; i < n; i += stride) p[i] = v;
}

template <class U>
void launch_fill(const Ctx& ctx, void* data, int64_t n, uint64_t pattern) {
  constexpr int64_t per16 = 16 / sizeof(U);
  U* p = static_cast<U*>(data);
  // Elements before the first 16-byte boundary (the tensor is element aligned).
  const int64_t to_boundary = int64_t((16 - (reinterpret_cast<uintptr_t>(p) & 15)) & 15) / int64_t(sizeof(U));
  const int64_t head = std::min(n, to_boundary);
  const int64_t n16 = (n - head) / per16;
  const U v = U(pattern);
  U lanes[per16];
  for (auto& x : lanes) x = v;
  uint4 v16;
  static_assert(sizeof(lanes) == sizeof(v16));
  std::memcpy(&v16, lanes, sizeof(v16));
  const unsigned grid = grid_for(std::max<int64_t>(1, n16), kThreads);  // the edges loop grid-stride too
  fill_kernel<U><<<grid, kThreads, 0, stream_of(ctx)>>>(p, n, head, n16, v, v16);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill(const Ctx& ctx, Tensor t, double value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const uint64_t pattern = ops::detail::fill_pattern(t.dtype, value);
  const size_t size = dtype_size(t.dtype);
  DAPO_CHECK((reinterpret_cast<uintptr_t>(t.data) & (size - 1)) == 0, "fill: tensor data not aligned to its dtype");
  bool bytes_equal = true;
  for (size_t b = 1; b < size; ++b) bytes_equal &= ((pattern >> (8 * b)) & 0xff) == (pattern & 0xff);
  if (bytes_equal) {
    DAPO_CUDA_CHECK(cudaMemsetAsync(t.data, int(pattern & 0xff), t.nbytes(), stream_of(ctx)));
    return;
  }
  switch (size) {
    case 2: launch_fill<uint16_t>(ctx, t.data, n, pattern); break;
    case 4: launch_fill<uint32_t>(ctx, t.data, n, pattern); break;
    case 8: launch_fill<uint64_t>(ctx, t.data, n, pattern); break;
    default: DAPO_FAIL("fill: element size ", size);
  }
}

}  // namespace dapo::ops::cuda
