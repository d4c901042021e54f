// The paged KV cache ops: the contract of kv_cache.h, checked once, then the
// backend. The metadata's values (slots, block ids, lengths) are checked by
// the CPU op, which reads them on the host; CUDA never reads them there and
// checks its kernels' limits (dtype, head dims, alignment, grid).
#include "dapo/ops/kv_cache.h"

#include <cmath>

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

// k_cache (num_blocks, block_size, Hkv, D) f32 or bf16 with block_size and
// Hkv > 0, v_cache of its dtype and shape.
void check_cache(const char* op, const Tensor& k_cache, const Tensor& v_cache) {
  check_float(op, k_cache, "k_cache");
  check_dtype(op, v_cache, k_cache.dtype, "v_cache");
  DAPO_CHECK(k_cache.ndim == 4, op, ": k_cache ", k_cache.shape_string(), " must be (num_blocks, block_size, Hkv, D)");
  DAPO_CHECK(v_cache.same_shape(k_cache), op, ": v_cache ", v_cache.shape_string(), " vs k_cache ",
             k_cache.shape_string());
  DAPO_CHECK(k_cache.shape[1] > 0 && k_cache.shape[2] > 0, op, ": empty cache geometry ", k_cache.shape_string());
}

void check_kv_cache_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v,
                          const Tensor& slot_mapping) {
  const char* op = "kv_cache_write";
  check_cache(op, k_cache, v_cache);
  check_dtype(op, k, k_cache.dtype, "k");
  check_dtype(op, v, k_cache.dtype, "v");
  check_dtype(op, slot_mapping, DType::i32, "slot_mapping");
  DAPO_CHECK(slot_mapping.ndim == 1, op, ": slot_mapping ", slot_mapping.shape_string(), " must be (N)");
  const int64_t N = slot_mapping.shape[0], Hkv = k_cache.shape[2], D = k_cache.shape[3];
  DAPO_CHECK_SHAPE(k, {N, Hkv, D});
  DAPO_CHECK_SHAPE(v, {N, Hkv, D});
  check_outputs_apart(op, {{k_cache, "k_cache"}, {v_cache, "v_cache"}},
                      {{k, "k"}, {v, "v"}, {slot_mapping, "slot_mapping"}});
}

}  // namespace

void detail::check_paged_attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                   const Tensor& block_table, const Tensor& context_lens, const Tensor& cu_seqlens_q,
                                   int64_t max_context_len, float scale) {
  const char* op = "paged_attention";
  check_cache(op, k_cache, v_cache);
  check_dtype(op, q, k_cache.dtype, "q");
  check_dtype(op, out, k_cache.dtype, "out");
  check_dtype(op, block_table, DType::i32, "block_table");
  check_dtype(op, context_lens, DType::i32, "context_lens");
  check_dtype(op, cu_seqlens_q, DType::i32, "cu_seqlens_q");
  DAPO_CHECK(q.ndim == 3, op, ": q ", q.shape_string(), " must be (N, Hq, D)");
  const int64_t N = q.shape[0], Hq = q.shape[1], Hkv = k_cache.shape[2], D = k_cache.shape[3];
  DAPO_CHECK(q.shape[2] == D, op, ": q ", q.shape_string(), " vs cache head dim ", D);
  DAPO_CHECK(Hq % Hkv == 0, op, ": Hq = ", Hq, " is not a multiple of Hkv = ", Hkv);
  DAPO_CHECK_SHAPE(out, {N, Hq, D});
  DAPO_CHECK(block_table.ndim == 2, op, ": block_table ", block_table.shape_string(), " must be (B, max_blocks)");
  const int64_t B = block_table.shape[0];
  DAPO_CHECK_SHAPE(context_lens, {B});
  DAPO_CHECK_SHAPE(cu_seqlens_q, {B + 1});
  DAPO_CHECK(max_context_len >= 0, op, ": max_context_len = ", max_context_len);
  DAPO_CHECK(std::isfinite(scale), op, ": scale ", scale, " is not finite");
  check_outputs_apart(op, {{out, "out"}},
                      {{q, "q"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}, {block_table, "block_table"},
                       {context_lens, "context_lens"}, {cu_seqlens_q, "cu_seqlens_q"}});
}

void kv_cache_write(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v,
                    Tensor slot_mapping) {
  check_kv_cache_write(k_cache, v_cache, k, v, slot_mapping);
  DAPO_DISPATCH(ctx, kv_cache_write, k_cache, v_cache, k, v, slot_mapping);
}

void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache,
                     Tensor block_table, Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len,
                     float scale) {
  detail::check_paged_attention(out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q, max_context_len,
                                scale);
  DAPO_DISPATCH(ctx, paged_attention, out, q, k_cache, v_cache, block_table, context_lens, cu_seqlens_q,
                max_context_len, scale);
}

}  // namespace dapo::ops
