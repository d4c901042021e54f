// Private to the model module: one Qwen2 decoder layer's forward and
// backward (tensor-parallel), the buffers they work in, and the allocator
// that carves those buffers from an arena or only counts their bytes
// (core/carver.h), so that memory planning follows the very allocation code
// it plans for.
#pragma once

#include <initializer_list>

#include "dapo/core/carver.h"
#include "dapo/model/activations.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"

namespace dapo::model::detail {

using Dims = Qwen2Model::Dims;
using LayerParams = Qwen2Model::LayerParams;

// core/carver.h's Carver, with the model's activation dtype.
class Carver : public dapo::Carver {
 public:
  using dapo::Carver::Carver;
  // An activation: the model's activation dtype (Dims::act: f32 on the CPU
  // backend, bf16 on CUDA).
  Tensor act(const Dims& d, std::initializer_list<int64_t> dims) { return alloc(d.act, dims); }
};

// Everything of a layer but its input x, for T tokens. Without `raw_qk`
// (generation, whose q/k norms run in place) no q_raw, k_raw, rstd_q, rstd_k.
LayerActivations carve_layer(Carver& c, const Dims& d, int64_t T, bool raw_qk = true);

// The backward's per-layer temporaries, reused by every layer.
struct LayerGradBuffers {
  Tensor dxn;    // (T, C) gradient of a norm's output
  Tensor dh;     // (T, il)
  Tensor dgate;  // (T, il)
  Tensor dup;    // (T, il)
  Tensor dattn;  // (T, hq, D)
  Tensor dq;     // (T, hq, D)
  Tensor dk;     // (T, hkv, D)
  Tensor dv;     // (T, hkv, D)
  Tensor dq_raw; // (T, hq, D) Qwen3: the gradient before q_norm
  Tensor dk_raw; // (T, hkv, D) Qwen3: before k_norm
};
LayerGradBuffers carve_layer_grads(Carver& c, const Dims& d, int64_t T);

// Where a layer's fused "residual add + next norm" writes: the layer output
// x (the residual stream after the MLP) and the next norm's output and
// statistics (the next layer's input_layernorm, or model.norm after the
// last layer).
struct NextNorm {
  Tensor x;       // (T, C) x_mid + mlp output; may be the layer's own a.x (updated in place)
  Tensor xn;      // (T, C) rmsnorm(x) * weight
  Tensor rstd;    // (T) f32
  Tensor weight;  // (C) the next norm's weight
  Tensor ssq;     // defined: fold the norm into down_proj (norm_fold.h): xn gets
                  // x * weight and ssq the row sums of squares; rstd is not written
};

// xn, rstd = input_layernorm(x) for the first layer (the others get theirs
// from the previous layer's fused residual + norm) and for recomputation.
void norm_input(const ops::Ctx& ctx, const Dims& d, const LayerParams& w, LayerActivations& a);

// The attention half of a layer. The new tokens' attention runs either
// over the packed batch itself (training, cache == nullptr) or over the
// paged KV cache (generation).
struct CacheStep {
  Tensor k_cache, v_cache;  // (num_blocks, block_size, hkv, D)
  Tensor slot_mapping, block_table, context_lens, cu_seqlens_q;
  int64_t max_context_len = 0;  // >= every context_lens[b] (ops::paged_attention)
  int64_t fresh_max_seqlen = 0;  // CachedBatch::fresh_max_seqlen
};

// Forward of one layer. On entry a.x (T, C) is the input and a.xn1, a.rstd1
// its input_layernorm (norm_input, or the previous layer's NextNorm); fills
// every other field of `a`. With `next`, ends with the fused residual add
// and next norm into it; without, stops after the MLP's SwiGLU (all the
// backward needs; the recompute path saves the down projection and its
// all-reduce). partial: (T, C) temporary for the row-parallel outputs
// before reduction.
void layer_forward(const ops::Ctx& ctx, const parallel::Comm& tp, const Dims& d, const LayerParams& w,
                   LayerActivations& a, const NextNorm* next, Tensor partial, Tensor positions, Tensor cu_seqlens,
                   int64_t max_seqlen, const CacheStep* cache);

// Backward of one layer. dx: (T, C), on entry the whole gradient of the
// layer's output (the next norm's part included), on return that of its
// input (in place). Gradients of the
// layer's parameters are ACCUMULATED into g. kv_group: the KV replica
// group, or nullptr when KV heads are not replicated.
void layer_backward(const ops::Ctx& ctx, const parallel::Comm& tp, const parallel::Comm* kv_group,
                    const Dims& d, const LayerParams& w, const LayerParams& g, const LayerActivations& a,
                    Tensor dx, const LayerGradBuffers& b, Tensor cu_seqlens, int64_t max_seqlen,
                    Tensor positions);

}  // namespace dapo::model::detail
