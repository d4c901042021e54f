// The RoPE family (rope.h): rope_forward, rope_backward and the fused
// rope_kv_write; the contract checked once, then the backend. What stays in
// a backend: the CPU's f32 and its check of the slots it reads on the host;
// CUDA's largest head dim (D <= 512) and rope_kv_write's bf16.
#include "dapo/ops/rope.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;

// out and in are the op's (out, in) or (din, dout), named `out_name` and `in_name`.
void check_rope(const char* op, const Tensor& out, const Tensor& in, const Tensor& positions, float theta,
                const char* out_name, const char* in_name) {
  check_float(op, in, in_name);
  check_dtype(op, out, in.dtype, out_name);
  check_dtype(op, positions, DType::i32, "positions");
  DAPO_CHECK(in.ndim == 3, op, ": ", in_name, " must be (T, H, D), got ", in.shape_string());
  const int64_t T = in.shape[0], H = in.shape[1], D = in.shape[2];
  DAPO_CHECK(D % 2 == 0, op, ": head dimension ", D, " must be even");
  DAPO_CHECK(::dapo::detail::shape_is(out, {T, H, D}), op, ": ", out_name, " has shape ", out.shape_string(),
             ", expected ", ::dapo::detail::dims_string({T, H, D}));
  DAPO_CHECK_SHAPE(positions, {T});
  DAPO_CHECK(theta > 0.0f, op, ": theta ", theta, " must be positive");
  // In-place is fine (each pair is read before it is written); partial
  // overlap would read already-rotated values.
  DAPO_CHECK(out.data == in.data || !detail::shares_bytes(out, in), op, ": ", out_name, " and ", in_name,
             " overlap without being the same buffer");
  DAPO_CHECK(!detail::shares_bytes(out, positions), op, ": ", out_name, " overlaps positions");
}

}  // namespace

void detail::check_rope_kv_write(const char* op, const Tensor& q, const Tensor& k, const Tensor& k_cache,
                                 const Tensor& v_cache, const Tensor& v, const Tensor& positions,
                                 const Tensor& slot_mapping, float theta, const HeadNorm& hn) {
  check_float(op, q, "q");
  check_dtype(op, k, q.dtype, "k");
  check_dtype(op, k_cache, q.dtype, "k_cache");
  check_dtype(op, v_cache, q.dtype, "v_cache");
  check_dtype(op, v, q.dtype, "v");
  check_dtype(op, positions, DType::i32, "positions");
  check_dtype(op, slot_mapping, DType::i32, "slot_mapping");
  DAPO_CHECK(k_cache.ndim == 4, op, ": k_cache ", k_cache.shape_string(),
             " must be (num_blocks, block_size, Hkv, D)");
  DAPO_CHECK(v_cache.same_shape(k_cache), op, ": v_cache ", v_cache.shape_string(), " vs k_cache ",
             k_cache.shape_string());
  DAPO_CHECK(k_cache.shape[1] > 0 && k_cache.shape[2] > 0, op, ": empty cache geometry ", k_cache.shape_string());
  DAPO_CHECK(q.ndim == 3, op, ": q ", q.shape_string(), " must be (T, Hq, D)");
  const int64_t T = q.shape[0], D = q.shape[2], Hkv = k_cache.shape[2];
  DAPO_CHECK(D % 2 == 0, op, ": head dimension ", D, " must be even");
  DAPO_CHECK(k_cache.shape[3] == D, op, ": k_cache ", k_cache.shape_string(), " vs q ", q.shape_string());
  DAPO_CHECK_SHAPE(k, {T, Hkv, D});
  DAPO_CHECK_SHAPE(v, {T, Hkv, D});
  DAPO_CHECK_SHAPE(positions, {T});
  DAPO_CHECK_SHAPE(slot_mapping, {T});
  DAPO_CHECK(theta > 0.0f, op, ": theta ", theta, " must be positive");
  // One launch reads and writes all of them at once: no aliasing at all.
  const Tensor* all[] = {&q, &k, &k_cache, &v_cache, &v, &positions, &slot_mapping};
  const char* names[] = {"q", "k", "k_cache", "v_cache", "v", "positions", "slot_mapping"};
  for (int a = 0; a < 7; ++a)
    for (int b = a + 1; b < 7; ++b)
      DAPO_CHECK(!detail::shares_bytes(*all[a], *all[b]), op, ": ", names[a], " overlaps ", names[b]);
  DAPO_CHECK(hn.active() == hn.k_weight.defined(), op, ": hn.",
             hn.active() ? "q_weight without hn.k_weight" : "k_weight without hn.q_weight");
  if (!hn.active()) return;
  const Tensor* weights[] = {&hn.q_weight, &hn.k_weight};
  const char* weight_names[] = {"hn.q_weight", "hn.k_weight"};
  for (int w = 0; w < 2; ++w) {
    check_dtype(op, *weights[w], q.dtype, weight_names[w]);
    DAPO_CHECK(::dapo::detail::shape_is(*weights[w], {D}), op, ": ", weight_names[w], " has shape ",
               weights[w]->shape_string(), ", expected ", ::dapo::detail::dims_string({D}));
    // Read while q, k and the caches are written (the CUDA fallback norms q and k in place).
    for (int a = 0; a < 4; ++a)
      DAPO_CHECK(!detail::shares_bytes(*weights[w], *all[a]), op, ": ", weight_names[w], " overlaps ", names[a]);
  }
  DAPO_CHECK(hn.eps > 0.0f, op, ": hn.eps ", hn.eps, " must be positive");
}

void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta) {
  check_rope("rope_forward", out, in, positions, theta, "out", "in");
  DAPO_DISPATCH(ctx, rope_forward, out, in, positions, theta);
}

void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta) {
  check_rope("rope_backward", din, dout, positions, theta, "din", "dout");
  DAPO_DISPATCH(ctx, rope_backward, din, dout, positions, theta);
}

void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta, const HeadNorm& hn) {
  // The weights sit in a struct that DAPO_DISPATCH's device check does not see.
  detail::check_devices(ctx, "rope_kv_write", "hn.q_weight, hn.k_weight", hn.q_weight, hn.k_weight);
  detail::check_rope_kv_write("rope_kv_write", q, k, k_cache, v_cache, v, positions, slot_mapping, theta, hn);
  DAPO_DISPATCH(ctx, rope_kv_write, q, k, k_cache, v_cache, v, positions, slot_mapping, theta, hn);
}

}  // namespace dapo::ops
