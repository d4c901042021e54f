// CUDA fused q/k/v product, RoPE and KV-cache write (qkv_rope_kv_write.h):
// one launch of the skinny GEMM with its RoPE + cache epilogue
// (linear_multi.cu) where linear_forward_multi takes the skinny path and a
// tile can hold whole heads and there is no head norm; otherwise
// linear_forward_multi then rope_kv_write, which is what the fused launch
// reproduces bit for bit.
#include "common.cuh"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rope.h"
#include "attention/rope_common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/gemm/gemv.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {

void qkv_rope_kv_write(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                       Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta, const RowNorm& rn,
                       const HeadNorm& hn) {
  const ops::detail::QkvHeads h = ops::detail::qkv_heads(qkv, k_cache);
  const int64_t T = in.ndim == 2 ? in.shape[0] : 0, K = in.ndim == 2 ? in.shape[1] : 0, D = k_cache.shape[3];
  // At a few rows the small-batch kernel's product, then rope_kv_write.
  // Batch-invariant: the trainer's order of things, the invariant product
  // (linear_forward_multi), then RoPE and the cache write.
  const bool own = T > 0 && !ctx.batch_invariant;
  const bool gemv = own && detail::gemv_supported(in, qkv) && detail::gemv_preferred(T, K, qkv);
  const bool skinny = !gemv && own && detail::linear_multi_skinny_supported(in, qkv) &&
                      detail::linear_multi_skinny_preferred(T, K, qkv);
  // The contract is checked by ops::qkv_rope_kv_write (the caches, positions
  // and slots as rope_kv_write's); here what the fused epilogue can take
  // (not the head norm: an epilogue tile's threads do not hold whole heads).
  bool fused = !hn.active() && skinny && D % 8 == 0 && D / 2 <= cuda::detail::kRopeMaxHalf;
  for (const LinearSegment& s : qkv)
    fused = fused && s.out.dtype == DType::bf16 && reinterpret_cast<uintptr_t>(s.out.data) % 8 == 0;
  if (fused) {
    const detail::SkinnyPlan plan = detail::skinny_rope_plan(T, K, qkv, D);
    if (plan.config >= 0)
      return detail::linear_forward_multi_skinny_rope(ctx, in, qkv, k_cache, v_cache, positions, slot_mapping, theta,
                                                      plan, &rn);
  }
  // Unfused: the skinny product still takes the row norm in its sums; cuBLASLt
  // gets the normed rows.
  if (rn.active() && skinny)
    detail::linear_forward_multi_skinny(ctx, in, qkv, nullptr, &rn);
  else {
    if (rn.active()) cuda::row_norm_apply(ctx, in, rn);
    cuda::linear_forward_multi(ctx, in, qkv);
  }
  cuda::rope_kv_write(ctx, h.q, h.k, k_cache, v_cache, h.v, positions, slot_mapping, theta, hn);
}

}  // namespace dapo::ops::cuda
