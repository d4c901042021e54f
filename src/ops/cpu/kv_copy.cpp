// CPU reference of the KV-cache block copy: the block ids are validated
// first (range, distinct destinations, no destination that is also a
// source), then each block of each pool is one contiguous memcpy.
#include "dapo/ops/kv_copy.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

#include <cstring>

namespace dapo::ops::cpu {

// ops::kv_block_copy checked the contract; the reference copies f32 pools
// and checks the ids, which it reads here, before any block moves.
void kv_block_copy(const Ctx&, Tensor k_cache, Tensor v_cache, Tensor src_blocks, Tensor dst_blocks) {
  ops::detail::check_dtype("kv_block_copy on the CPU", k_cache, DType::f32, "k_cache");
  const int64_t num_blocks = k_cache.shape[0], M = src_blocks.shape[0];
  const int32_t* src = src_blocks.ptr<int32_t>();  // (M)
  const int32_t* dst = dst_blocks.ptr<int32_t>();  // (M)
  for (int64_t j = 0; j < M; ++j) {
    DAPO_CHECK(src[j] >= 0 && src[j] < num_blocks && dst[j] >= 0 && dst[j] < num_blocks,
               "kv_block_copy: copy ", j, " is block ", src[j], " -> ", dst[j], ", outside [0, ", num_blocks, ")");
    // M is a handful of blocks per step: the quadratic check costs nothing.
    for (int64_t i = 0; i < M; ++i) {
      DAPO_CHECK(i == j || dst[i] != dst[j], "kv_block_copy: block ", dst[j], " is the destination of two copies");
      DAPO_CHECK(src[i] != dst[j], "kv_block_copy: block ", dst[j], " is both a source and a destination");
    }
  }
  const int64_t block_elems = k_cache.shape[1] * k_cache.shape[2] * k_cache.shape[3];
  float* k = k_cache.ptr<float>();  // (num_blocks, block_elems)
  float* v = v_cache.ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < M; ++j) {
    std::memcpy(k + dst[j] * block_elems, k + src[j] * block_elems, size_t(block_elems) * sizeof(float));
    std::memcpy(v + dst[j] * block_elems, v + src[j] * block_elems, size_t(block_elems) * sizeof(float));
  }
}

}  // namespace dapo::ops::cpu
