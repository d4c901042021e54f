// CPU reference of the fused q/k/v product, RoPE and KV-cache write: by
// definition the two CPU ops in sequence (qkv_rope_kv_write.h), after
// ops::qkv_rope_kv_write has checked the contract.
#include "dapo/ops/qkv_rope_kv_write.h"

#include "dapo/ops/rope.h"
#include "src/ops/cpu/cpu_ops.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cpu {

void qkv_rope_kv_write(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                       Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta, const RowNorm& rn,
                       const HeadNorm& hn) {
  const ops::detail::QkvHeads h = ops::detail::qkv_heads(qkv, k_cache);
  if (rn.active()) cpu::row_norm_apply(ctx, in, rn);
  cpu::linear_forward_multi(ctx, in, qkv);
  cpu::rope_kv_write(ctx, h.q, h.k, k_cache, v_cache, h.v, positions, slot_mapping, theta, hn);
}

}  // namespace dapo::ops::cpu
