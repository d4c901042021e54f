// CPU reference of the fused decode-step RoPE + KV cache write: by
// definition the three CPU ops in sequence (rope_kv_write.h). The aliasing
// the fused op forbids is checked first; every other argument is checked by
// the op that uses it.
#include "dapo/ops/rope_kv_write.h"

#include "dapo/ops/kv_cache.h"
#include "dapo/ops/rope.h"

namespace dapo::ops::cpu {

void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta) {
  const Tensor* all[] = {&q, &k, &k_cache, &v_cache, &v, &positions, &slot_mapping};
  const char* names[] = {"q", "k", "k_cache", "v_cache", "v", "positions", "slot_mapping"};
  for (int a = 0; a < 7; ++a)
    for (int b = a + 1; b < 7; ++b)
      DAPO_CHECK(!overlaps(*all[a], *all[b]), "rope_kv_write: ", names[a], " overlaps ", names[b]);
  cpu::rope_forward(ctx, q, q, positions, theta);
  cpu::rope_forward(ctx, k, k, positions, theta);
  cpu::kv_cache_write(ctx, k_cache, v_cache, k, v, slot_mapping);
}

}  // namespace dapo::ops::cpu
