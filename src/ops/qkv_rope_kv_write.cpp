// The fused q/k/v product, RoPE and KV-cache write: the contract of
// qkv_rope_kv_write.h, checked once, then the backend. The segments' tensors
// sit in a span that DAPO_DISPATCH's device check does not see: checked
// here, as are the head norm's weights. The RoPE + cache write part is
// rope_kv_write's contract on the products' heads (detail::check_rope_kv_write,
// rope.cpp), the head norm's included.
#include "dapo/ops/qkv_rope_kv_write.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

void check_qkv_rope_kv_write(const Tensor& in, std::span<const LinearSegment> qkv, const Tensor& k_cache,
                             const Tensor& v_cache, const Tensor& positions, const Tensor& slot_mapping, float theta,
                             const RowNorm& rn, const HeadNorm& hn) {
  const char* op = "qkv_rope_kv_write";
  // The product's contract: both backends run linear_forward_multi's
  // backend (or its fused kernel) on these segments without ops::'s checks.
  detail::check_linear_forward_multi(op, in, qkv);
  if (rn.active()) {
    detail::check_row_norm(rn, in.shape[0], in.shape[1], op);
    DAPO_CHECK(rn.ssq.data != nullptr || rn.ssq.numel() == 0, op, ": rn.ssq has no data");
    // The CPU norms in's rows in place before the product.
    DAPO_CHECK(!overlaps(rn.ssq, in), op, ": rn.ssq overlaps in");
  }
  DAPO_CHECK(qkv.size() == 3, op, ": ", qkv.size(), " segments, expected q, k and v");
  DAPO_CHECK(k_cache.ndim == 4, op, ": k_cache ", k_cache.shape_string(), " must be (num_blocks, block_size, Hkv, D)");
  const int64_t Hkv = k_cache.shape[2], D = k_cache.shape[3];
  DAPO_CHECK(D > 0, op, ": head dimension ", D);
  for (const LinearSegment& s : qkv)
    DAPO_CHECK(s.out.ndim == 2 && s.out.shape[1] % D == 0, op, ": output ", s.out.shape_string(),
               " is not rows of heads of ", D);
  const int64_t T = qkv[0].out.shape[0];
  DAPO_CHECK_SHAPE(qkv[1].out, {T, Hkv * D});
  DAPO_CHECK_SHAPE(qkv[2].out, {T, Hkv * D});
  const detail::QkvHeads h = detail::qkv_heads(qkv, k_cache);
  detail::check_rope_kv_write(op, h.q, h.k, k_cache, v_cache, h.v, positions, slot_mapping, theta, hn);
}

}  // namespace

detail::QkvHeads detail::qkv_heads(std::span<const LinearSegment> qkv, const Tensor& k_cache) {
  const int64_t T = qkv[0].out.shape[0], Hkv = k_cache.shape[2], D = k_cache.shape[3];
  return {qkv[0].out.reshape({T, qkv[0].out.shape[1] / D, D}), qkv[1].out.reshape({T, Hkv, D}),
          qkv[2].out.reshape({T, Hkv, D})};
}

void qkv_rope_kv_write(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                       Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta, const RowNorm& rn,
                       const HeadNorm& hn) {
  for (const LinearSegment& s : qkv)
    detail::check_devices(ctx, "qkv_rope_kv_write", "segment.out, segment.weight, segment.bias", s.out, s.weight,
                          s.bias);
  detail::check_devices(ctx, "qkv_rope_kv_write", "rn.ssq, hn.q_weight, hn.k_weight", rn.ssq, hn.q_weight,
                        hn.k_weight);
  check_qkv_rope_kv_write(in, qkv, k_cache, v_cache, positions, slot_mapping, theta, rn, hn);
  DAPO_DISPATCH(ctx, qkv_rope_kv_write, in, qkv, k_cache, v_cache, positions, slot_mapping, theta, rn, hn);
}

}  // namespace dapo::ops
