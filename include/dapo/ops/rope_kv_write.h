// The generation engine's decode-step prologue in one op: RoPE on the new
// tokens' queries and keys (in place), then the rotated keys and the values
// into the paged KV cache. Exactly
//   rope_forward(q, q, positions, theta);
//   rope_forward(k, k, positions, theta);
//   kv_cache_write(k_cache, v_cache, k, v, slot_mapping);
// (rope.h, kv_cache.h), with the same results, bit for bit on each backend.
// It exists because a decode step has only B = 1..256 tokens, so each of
// those three ops is a tiny kernel whose launch costs more than its work;
// one launch does all of it.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// q:            (T, Hq, D), rotated in place (overwritten).
// k:            (T, Hkv, D), rotated in place (overwritten).
// k_cache, v_cache: (num_blocks, block_size, Hkv, D), updated in place: token
//               i's rotated k row and its v row go to flat slot
//               slot_mapping[i] (kv_cache.h's layout); other slots untouched.
// v:            (T, Hkv, D), read only.
// positions:    (T) i32, each token's position inside its sequence (rope.h).
// slot_mapping: (T) i32, flat cache slot of each token; -1 skips the cache
//               write of that token (its q and k are still rotated). Two
//               tokens must not name the same slot.
// theta:        the RoPE base (> 0), e.g. kRopeThetaQwen2.
// D even. q, k, v, the two caches, positions and slot_mapping are pairwise
// disjoint buffers (no aliasing at all).
// CPU backend: f32 q, k, v and caches; the three CPU ops in sequence.
void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta);

namespace cpu {
void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta);
}  // namespace cpu

// CUDA builds only: q, k, v, k_cache, v_cache bf16 (the dtypes of
// cuda::kv_cache_write; rope's f32 path is not offered); positions and
// slot_mapping i32; all on the device; D <= 512. One kernel launch whose
// results are bit-identical to cuda::rope_forward twice and
// cuda::kv_cache_write (the same device code, rope_common.cuh). As there, the
// metadata is not read on the host: slots outside [0, num_blocks *
// block_size) are skipped, not diagnosed (the CPU op checks them).
namespace cuda {
void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta);
namespace detail {
// The op's argument checks (devices, dtypes, shapes, the aliasing it
// forbids, theta), messages prefixed with `op`: also those of
// qkv_rope_kv_write's fused launch, which does this op's work.
void check_rope_kv_write(const Ctx& ctx, const char* op, const Tensor& q, const Tensor& k, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& v, const Tensor& positions, const Tensor& slot_mapping,
                         float theta);
}  // namespace detail
}  // namespace cuda

}  // namespace dapo::ops
