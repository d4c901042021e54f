// Rotary position embedding (RoPE) of Qwen2 / HF transformers, the
// "rotate_half" convention: the head dimension D is split into two halves
// [x1 | x2] and pair (x1[i], x2[i]) is rotated by the angle pos * inv_freq_i,
//   inv_freq_i = 1 / theta^(2i / D),   i in [0, D/2)
//   out[i]       = x[i]       * cos - x[i + D/2] * sin
//   out[i + D/2] = x[i + D/2] * cos + x[i]       * sin
// (not the interleaved GPT-J pairing (x[2i], x[2i+1])).
//
// Numerics: to match HF transformers to fp32 rounding, inv_freq and the
// angle are computed in fp32 the way HF's Qwen2RotaryEmbedding does it:
//   inv_freq = 1.0 / (theta ** (arange(0, D, 2).float() / D))   (fp32 pow, fp32 divide)
//   freqs    = position.float() * inv_freq                      (one fp32 product)
//   cos, sin = cos(freqs), sin(freqs)                           (fp32)
// and out = x*cos + rotate_half(x)*sin with separately rounded products.
// Computing the angle in double would be "more exact" but differs from the
// reference model by up to ~1e-3 radians at positions in the tens of
// thousands, which is larger than the fp32 tolerance the fixtures assume.
//
// Dtypes: the CPU backend takes f32 only. On CUDA, in and out are both bf16
// (production) or both f32, with the same fp32 recipe: inv_freq computed on
// the host by the same code as the CPU's, the fp32 product, precise
// cosf/sinf (sincosf; not the fast __cosf/__sinf, whose error grows with
// the angle), and unfused products; results differ from the CPU's only by
// the last bit of cos/sin (and the bf16 rounding of the output).
//
// Layout: packed tokens (no padding); positions restart at 0 for every
// sequence and are given per token, so one call covers a whole packed batch,
// a chunked prefill and a decode step alike.
//
// The family: rope_forward and rope_backward, and rope_kv_write, the decode
// step's RoPE fused with the KV cache write (kv_cache.h). The fused q/k/v
// product with a RoPE epilogue is qkv_rope_kv_write.h.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// Qwen2.5's rope_theta (config.json); Qwen2-0.5B..7B also use 1e6, older
// Llama-style models 1e4.
inline constexpr float kRopeThetaQwen2 = 1.0e6f;

// out: (T, H, D) f32, overwritten.   in: (T, H, D) f32, D even.
// positions: (T) i32, the position of each token inside its sequence.
// theta: the RoPE base (> 0).
// out may be the same buffer as in (in-place); partial overlap is not
// allowed, nor may out overlap positions.
void rope_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor positions, float theta);

// The gradient of rope_forward: the inverse (transposed) rotation of dout.
// din: (T, H, D) f32, overwritten.   dout: (T, H, D) f32.   positions: (T) i32.
// din may be the same buffer as dout (in-place), as for rope_forward.
void rope_backward(const Ctx& ctx, Tensor din, Tensor dout, Tensor positions, float theta);

// CUDA backend: bf16 or f32 as above, D <= 512; in-place as above.

// Qwen3's q_norm and k_norm: an RMSNorm over each head's D elements of q
// and of k (rmsnorm.h's formula, one weight of D shared by all heads), before
// RoPE. Qwen2 has none (undefined weights).
struct HeadNorm {
  Tensor q_weight;  // (D), q's dtype; undefined: no norm
  Tensor k_weight;  // (D), q's dtype
  float eps = 1e-6f;
  bool active() const { return q_weight.defined(); }
};

// The generation engine's decode-step prologue in one op: RoPE on the new
// tokens' queries and keys (in place), then the rotated keys and the values
// into the paged KV cache. Exactly
//   rope_forward(q, q, positions, theta);
//   rope_forward(k, k, positions, theta);
//   kv_cache_write(k_cache, v_cache, k, v, slot_mapping);
// (kv_cache.h), with the same results, bit for bit on each backend.
// It exists because a decode step has only B = 1..256 tokens, so each of
// those three ops is a tiny kernel whose launch costs more than its work;
// one launch does all of it.
//
// q:            (T, Hq, D), rotated in place (overwritten).
// k:            (T, Hkv, D), rotated in place (overwritten).
// k_cache, v_cache: (num_blocks, block_size, Hkv, D), updated in place: token
//               i's rotated k row and its v row go to flat slot
//               slot_mapping[i] (kv_cache.h's layout); other slots untouched.
// v:            (T, Hkv, D), read only.
// positions:    (T) i32, each token's position inside its sequence.
// slot_mapping: (T) i32, flat cache slot of each token; -1 skips the cache
//               write of that token (its q and k are still rotated). Two
//               tokens must not name the same slot.
// theta:        the RoPE base (> 0), e.g. kRopeThetaQwen2.
// D even; q, k, v and the caches of one dtype. q, k, v, the two caches,
// positions and slot_mapping are pairwise disjoint buffers (no aliasing at
// all).
// CPU backend: f32 q, k, v and caches; the three CPU ops in sequence.
// hn:           active (Qwen3): q and k are first normed per head in place,
//               exactly rmsnorm_forward(q as (T * Hq, D), hn.q_weight, hn.eps)
//               and the same of k with hn.k_weight (rmsnorm.h; the per-row
//               rstd is not kept), then rotated and written as above.
//               hn.q_weight and hn.k_weight: (D) of q's dtype on q's device,
//               both defined (k_weight alone is refused); they may be one
//               buffer but overlap none of q, k and the caches. hn.eps > 0.
void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta, const HeadNorm& hn = {});

// CUDA backend: q, k, v, k_cache, v_cache bf16 (the dtypes of
// cuda::kv_cache_write; rope's f32 path is not offered); positions and
// slot_mapping i32; all on the device; D <= 512. One kernel launch whose
// results are bit-identical to cuda::rope_forward twice and
// cuda::kv_cache_write (the same device code, rope_common.cuh). As there, the
// metadata is not read on the host: slots outside [0, num_blocks *
// block_size) are skipped, not diagnosed (the CPU op checks them).
// With hn active: one launch of a kernel with a warp per (token, head) where
// D % 16 == 0, D <= 256 and q, k, v, the caches and the weights are 16-byte
// aligned, with the bits of cuda::rmsnorm_forward on the head rows then the
// launch above; elsewhere those two, rmsnorm_forward run in place on q and k
// (T * (Hq + Hkv) floats of ctx.scratch for its rstd).

}  // namespace dapo::ops
