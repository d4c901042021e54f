// The decode step's attention prologue in one op: the q, k and v products of
// one input, RoPE on q and k, and the new k and v into the paged KV cache.
// Exactly
//   linear_forward_multi(in, {q, k, v});
//   rope_kv_write(q (T, Hq, D), k (T, Hkv, D), k_cache, v_cache, v, positions, slot_mapping, theta, hn);
// (matmul.h, rope.h), with the same results on each backend;
// on CUDA bit for bit, as the fused kernel sums every product in the order
// and split of linear_forward_multi's own plan. It exists because a
// decode step's RoPE + cache write is a kernel of its own whose launch
// costs more than its work (an H100 spends ~4 us a layer on it at the
// Qwen2.5-0.5B shape, 128 sequences); on the skinny path that work moves
// into the product's epilogue.
#pragma once

#include <span>

#include "dapo/ops/context.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/rope.h"

namespace dapo::ops {

// in:           (T, C), the normed hidden states.
// qkv:          three segments (matmul.h): q out (T, Hq * D), k and v
//               outs (T, Hkv * D), OVERWRITTEN with the product, q and k then
//               rotated in place (rope.h); weights and biases as HF's.
// k_cache, v_cache: (num_blocks, block_size, Hkv, D), UPDATED: token i's
//               rotated k row and its v row at flat slot slot_mapping[i]
//               (-1 skips the token; kv_cache.h's layout).
// positions:    (T) i32, each token's position in its sequence.
// slot_mapping: (T) i32.
// theta:        the RoPE base (> 0).
// rn:           a folded norm of in's rows (norm_fold.h), or none: in is then
//               y, and the op computes as if in were row_norm_apply(y); the
//               CPU path and CUDA's unfused one apply it to `in` in place
//               (its contents afterwards are unspecified), CUDA's fused one
//               scales the products' fp32 sums instead.
// hn:           Qwen3's per-head norm of q and k before RoPE, or none
//               (rope.h): hn.q_weight and hn.k_weight (D) of the outputs'
//               dtype on their device, overlapping none of the outputs and
//               caches; hn.eps > 0.
// Aliasing and dtypes as the two ops': CPU f32, CUDA bf16 in, weights,
// outputs and caches.
void qkv_rope_kv_write(const Ctx& ctx, Tensor in, std::span<const LinearSegment> qkv, Tensor k_cache,
                       Tensor v_cache, Tensor positions, Tensor slot_mapping, float theta, const RowNorm& rn = {},
                       const HeadNorm& hn = {});

// CUDA backend: one launch (the skinny kernel with the RoPE + cache
// epilogue) where linear_forward_multi would take the skinny path with
// tiles that hold whole heads (detail::skinny_rope_plan) and hn is not
// active, else the two ops.

}  // namespace dapo::ops
