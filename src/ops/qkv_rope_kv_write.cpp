// Backend dispatch of the fused q/k/v product, RoPE and KV-cache write. The
// segments' tensors sit in a span that DAPO_DISPATCH's device check does
// not see: checked here.
#include "dapo/ops/qkv_rope_kv_write.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

detail::QkvHeads detail::qkv_heads(std::span<const LinearSegment> qkv, const Tensor& k_cache) {
  DAPO_CHECK(qkv.size() == 3, "qkv_rope_kv_write: ", qkv.size(), " segments, expected q, k and v");
  DAPO_CHECK(k_cache.ndim == 4, "qkv_rope_kv_write: k_cache ", k_cache.shape_string(),
             " must be (num_blocks, block_size, Hkv, D)");
  const int64_t Hkv = k_cache.shape[2], D = k_cache.shape[3];
  DAPO_CHECK(D > 0, "qkv_rope_kv_write: head dimension ", D);
  for (const LinearSegment& s : qkv)
    DAPO_CHECK(s.out.ndim == 2 && s.out.shape[1] % D == 0, "qkv_rope_kv_write: output ", s.out.shape_string(),
               " is not rows of heads of ", D);
  const int64_t T = qkv[0].out.shape[0];
  DAPO_CHECK_SHAPE(qkv[1].out, {T, Hkv * D});
  DAPO_CHECK_SHAPE(qkv[2].out, {T, Hkv * D});
  return {qkv[0].out.reshape({T, qkv[0].out.shape[1] / D, D}), qkv[1].out.reshape({T, Hkv, D}),
          qkv[2].out.reshape({T, Hkv, D})};
}

void qkv_rope_kv_write(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                       Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta, const RowNorm& rn) {
  for (const LinearSegment& s : qkv)
    detail::check_devices(ctx, "qkv_rope_kv_write", "segment.out, segment.weight, segment.bias", s.out, s.weight,
                          s.bias);
  detail::check_devices(ctx, "qkv_rope_kv_write", "rn.ssq", rn.ssq);
  DAPO_DISPATCH(ctx, qkv_rope_kv_write, in, qkv, k_cache, v_cache, positions, slot_mapping, theta, rn);
}

}  // namespace dapo::ops
