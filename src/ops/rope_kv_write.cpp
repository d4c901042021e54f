// Backend dispatch of the fused decode-step RoPE + KV cache write.
#include "dapo/ops/rope_kv_write.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta) {
  DAPO_DISPATCH(ctx, rope_kv_write, q, k, k_cache, v_cache, v, positions, slot_mapping, theta);
}

}  // namespace dapo::ops
