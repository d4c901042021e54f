// Backend dispatch of the paged KV cache ops.
#include "dapo/ops/kv_cache.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void kv_cache_write(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v,
                    Tensor slot_mapping) {
  DAPO_DISPATCH(ctx, kv_cache_write, k_cache, v_cache, k, v, slot_mapping);
}

void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache,
                     Tensor block_table, Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len,
                     float scale) {
  DAPO_DISPATCH(ctx, paged_attention, out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q,
                max_context_len, scale);
}

}  // namespace dapo::ops
