// The KV-cache block copy: the contract of kv_copy.h, checked once, then the
// backend. The block ids' values (range, distinct destinations, no
// destination that is also a source) are checked by the CPU op, which reads
// them on the host; CUDA skips ids outside the pool.
#include "dapo/ops/kv_copy.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;
using detail::check_outputs_apart;

void check_kv_block_copy(const Tensor& k_cache, const Tensor& v_cache, const Tensor& src_blocks,
                         const Tensor& dst_blocks) {
  const char* op = "kv_block_copy";
  check_float(op, k_cache, "k_cache");
  check_dtype(op, v_cache, k_cache.dtype, "v_cache");
  check_dtype(op, src_blocks, DType::i32, "src_blocks");
  check_dtype(op, dst_blocks, DType::i32, "dst_blocks");
  DAPO_CHECK(k_cache.ndim == 4, op, ": k_cache ", k_cache.shape_string(), " must be (num_blocks, block_size, Hkv, D)");
  DAPO_CHECK_SHAPE(v_cache, {k_cache.shape[0], k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]});
  DAPO_CHECK(src_blocks.ndim == 1, op, ": src_blocks ", src_blocks.shape_string(), " must be (M)");
  DAPO_CHECK_SHAPE(dst_blocks, {src_blocks.shape[0]});
  check_outputs_apart(op, {{k_cache, "k_cache"}, {v_cache, "v_cache"}},
                      {{src_blocks, "src_blocks"}, {dst_blocks, "dst_blocks"}});
}

}  // namespace

void kv_block_copy(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor src_blocks, Tensor dst_blocks) {
  check_kv_block_copy(k_cache, v_cache, src_blocks, dst_blocks);
  DAPO_DISPATCH(ctx, kv_block_copy, k_cache, v_cache, src_blocks, dst_blocks);
}

}  // namespace dapo::ops
