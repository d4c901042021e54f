// CUDA KV-cache block copy (copy-on-write of shared prompt blocks): every
// (copy, pool) pair is one CTA, so all blocks move in parallel; 16-byte
// accesses where the block's bytes and the pools' pointers allow.
#include "common.cuh"
#include "dapo/ops/kv_copy.h"
#include "ptx/pack.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

// Threads of a copy's CTA; they stride over the block's words.
constexpr int kCopyThreads = 256;

// blockIdx.x: the copy (grid-stride), blockIdx.y: 0 = k pool, 1 = v pool.
// `words` elements of type W per block (W a 16-byte pack or a single byte).
template <class W>
__global__ void kv_block_copy_kernel(W* k, W* v, const int32_t* src, const int32_t* dst, int64_t M,
                                     int64_t words, int64_t num_blocks) {
  W* pool = blockIdx.y == 0 ? k : v;
  for (int64_t j = blockIdx.x; j < M; j += gridDim.x) {
    const int64_t s = src[j], d = dst[j];
    if (s < 0 || s >= num_blocks || d < 0 || d >= num_blocks) continue;  // the CPU op diagnoses
    const W* from = pool + s * words;
    W* to = pool + d * words;
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) to[i] = from[i];
  }
}

struct alignas(16) Word16 {
  uint4 v;
};

}  // namespace

// The contract (shapes, dtypes, aliasing) is checked by ops::kv_block_copy;
// the kernel copies bytes, so f32 and bf16 pools alike.
void kv_block_copy(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor src_blocks, Tensor dst_blocks) {
  const int64_t M = src_blocks.shape[0];
  const int64_t num_blocks = k_cache.shape[0];
  const int64_t block_bytes = k_cache.nbytes() / (num_blocks > 0 ? num_blocks : 1);
  if (M == 0 || block_bytes == 0) return;
  const unsigned grid_x = unsigned(M < 65535 ? M : 65535);
  const dim3 grid(grid_x, 2);
  const auto* src = src_blocks.ptr<int32_t>();
  const auto* dst = dst_blocks.ptr<int32_t>();
  if (block_bytes % 16 == 0 && aligned16(k_cache.data) && aligned16(v_cache.data))
    kv_block_copy_kernel<Word16><<<grid, kCopyThreads, 0, stream_of(ctx)>>>(
        static_cast<Word16*>(k_cache.data), static_cast<Word16*>(v_cache.data), src, dst, M, block_bytes / 16,
        num_blocks);
  else
    kv_block_copy_kernel<unsigned char><<<grid, kCopyThreads, 0, stream_of(ctx)>>>(
        static_cast<unsigned char*>(k_cache.data), static_cast<unsigned char*>(v_cache.data), src, dst, M,
        block_bytes, num_blocks);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda
