// Backend dispatch of the KV-cache block copy.
#include "dapo/ops/kv_copy.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void kv_block_copy(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor src_blocks, Tensor dst_blocks) {
  DAPO_DISPATCH(ctx, kv_block_copy, k_cache, v_cache, src_blocks, dst_blocks);
}

}  // namespace dapo::ops
