// What the Qwen2 training forward keeps for the backward, as views into the
// caller's activation arena, and the packed batch it was computed on.
//
// Shapes use T tokens of this micro-batch, C hidden size, D head dim and
// this rank's local sizes under tensor parallelism: hq = Hq / tp query
// heads, hkv = max(1, Hkv / tp) KV heads, il = I / tp intermediate
// features, vl = V / tp vocabulary entries.
#pragma once

#include <cstddef>
#include <vector>

#include "dapo/core/tensor.h"

namespace dapo::model {

// A packed micro-batch: the B sequences concatenated without padding.
// All (host or device) i32 views owned by the caller, who keeps them alive
// until the backward has run. Ids outside [0, V) are not detected (under
// tp a rank cannot tell another shard's id from an invalid one): they give
// zero embeddings and meaningless log-probs, so callers must not pass them.
struct PackedBatch {
  Tensor tokens;      // (T) i32 token ids in [0, V)
  Tensor positions;   // (T) i32 position inside its sequence (restarts at 0 per sequence)
  Tensor cu_seqlens;  // (B+1) i32 cumulative offsets, cu_seqlens[0] = 0, cu_seqlens[B] = T
  Tensor targets;     // (T) i32 the token whose log-probability is scored at each position,
                      //     in [0, V) (the next token; positions that do not count get a
                      //     zero upstream gradient, their target only has to be a valid id)
  int64_t max_seqlen = 0;  // >= the longest sequence; 0: the model reads it from cu_seqlens,
                           //     which must then be on the host (device batches must set it)
};

// One decoder layer's saved tensors. With activation recomputation only x
// is kept; the rest is recomputed from it in the backward.
struct LayerActivations {
  Tensor x;             // (T, C) the layer's input (residual stream)
  Tensor rstd1;         // (T) input_layernorm's 1/rms
  Tensor xn1;           // (T, C) normalised input: q/k/v projections read it
  Tensor q;             // (T, hq, D) after RoPE (and q_norm)
  Tensor k;             // (T, hkv, D) after RoPE (and k_norm)
  // Qwen3 (q_norm, k_norm), training and scoring: the products before the
  // per-head norms, and the norms' 1/rms per (token, head). Undefined for
  // Qwen2, and in generation, where the norm runs in place.
  Tensor q_raw;         // (T, hq, D)
  Tensor k_raw;         // (T, hkv, D)
  Tensor rstd_q;        // (T * hq) f32
  Tensor rstd_k;        // (T * hkv) f32
  Tensor v;             // (T, hkv, D)
  Tensor attn;          // (T, hq, D) attention output before o_proj
  Tensor lse;           // (hq, T) attention log-sum-exp
  Tensor x_mid;         // (T, C) residual stream after attention
  Tensor rstd2;         // (T) post_attention_layernorm's 1/rms
  Tensor xn2;           // (T, C)
  Tensor gate, up, h;   // (T, il) gate_proj, up_proj outputs and silu(gate) * up
  // Generation only, norms folded into the products (ops/norm_fold.h): the
  // row sums of squares, (T, norm_fold_parts(C)) f32. ssq1 defined: xn1
  // holds x * w_in, unscaled (the previous layer folded input_layernorm).
  // ssq2 defined: fold post_attention_layernorm into o_proj (xn2 then holds
  // x_mid * w_post and rstd1, rstd2 are not written).
  Tensor ssq1, ssq2;
};

// Dtypes: Tensors of activations are the model's activation dtype (f32 on
// the CPU backend, bf16 on CUDA); norm statistics (rstd), attention lse,
// log-probs and entropies are f32 on both.
struct Activations {
  PackedBatch batch;
  float inv_temperature = 1.0f;
  bool recompute = false;
  size_t arena_mark = 0;                  // where the activation arena stood before the forward
  std::vector<LayerActivations> layers;   // (L)
  Tensor x_final;                         // (T, C) output of the last layer
  Tensor rstd_final;                      // (T) model.norm's 1/rms
  Tensor xn_final;                        // (T, C) lm_head's input
  Tensor lse;                             // (T) log-sum-exp of logits * inv_temperature (global)
  Tensor entropy;                         // (T) entropy (global)
};

}  // namespace dapo::model
