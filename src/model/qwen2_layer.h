// Private to the model module: one Qwen2 decoder layer's forward and
// backward (tensor-parallel), the buffers they work in, and the allocator
// that carves those buffers from an arena or only counts their bytes, so
// that memory planning follows the very allocation code it plans for.
#pragma once

#include <initializer_list>

#include "dapo/core/arena.h"
#include "dapo/model/activations.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/parallel/comm.h"

namespace dapo::model::detail {

using Dims = Qwen2Model::Dims;
using LayerParams = Qwen2Model::LayerParams;

// Carves f32/i32 tensors from an arena, or, without one, only counts the
// bytes the same sequence of allocations would take (tensors then have no
// data). peak() is the high-water mark since construction, relative to
// where the arena stood then.
class Carver {
 public:
  explicit Carver(Arena* arena) : arena_(arena), base_(arena ? arena->mark() : 0), used_(base_) {}
  Tensor alloc(DType dtype, std::initializer_list<int64_t> dims);
  Tensor f32(std::initializer_list<int64_t> dims) { return alloc(DType::f32, dims); }
  size_t mark() const { return used_; }
  void reset(size_t mark);
  size_t peak() const { return peak_ - base_; }

 private:
  Arena* arena_;
  size_t base_;
  size_t used_;
  size_t peak_ = 0;
};

// Everything of a layer but its input x, for T tokens.
LayerActivations carve_layer(Carver& c, const Dims& d, int64_t T);

// The backward's per-layer temporaries, reused by every layer.
struct LayerGradBuffers {
  Tensor dxn;    // (T, C) gradient of a norm's output
  Tensor dnorm;  // (T, C) gradient a norm passes to the residual stream
  Tensor dh;     // (T, il)
  Tensor dgate;  // (T, il)
  Tensor dup;    // (T, il)
  Tensor dattn;  // (T, hq, D)
  Tensor dq;     // (T, hq, D)
  Tensor dk;     // (T, hkv, D)
  Tensor dv;     // (T, hkv, D)
};
LayerGradBuffers carve_layer_grads(Carver& c, const Dims& d, int64_t T);

// out = a + b elementwise, (N, C) f32; out may be a or b. The residual
// connections; see the .cpp for why this is not (yet) an op.
void residual_add(const ops::Ctx& ctx, Tensor out, Tensor a, Tensor b);

// The attention half of a layer. The new tokens' attention runs either
// over the packed batch itself (training, cache == nullptr) or over the
// paged KV cache (generation).
struct CacheStep {
  Tensor k_cache, v_cache;  // (num_blocks, block_size, hkv, D)
  Tensor slot_mapping, block_table, context_lens, cu_seqlens_q;
};

// Forward of one layer. a.x (T, C) is the input; fills every other field
// of `a`. When x_out has data, writes the layer output (T, C) there;
// without, stops after the MLP's SwiGLU (all the backward needs; the
// recompute path saves the down projection and its all-reduce). x_out
// may be a.x itself (the residual stream updated in place).
// partial: (T, C) temporary for the row-parallel outputs before reduction.
void layer_forward(const ops::Ctx& ctx, const parallel::Comm& tp, const Dims& d, const LayerParams& w,
                   LayerActivations& a, Tensor x_out, Tensor partial, Tensor positions, Tensor cu_seqlens,
                   int64_t max_seqlen, const CacheStep* cache);

// Backward of one layer. dx: (T, C), on entry the gradient of the layer's
// output, on return the gradient of its input (in place). Gradients of the
// layer's parameters are ACCUMULATED into g. kv_group: the KV replica
// group, or nullptr when KV heads are not replicated.
void layer_backward(const ops::Ctx& ctx, const parallel::Comm& tp, const parallel::Comm* kv_group,
                    const Dims& d, const LayerParams& w, const LayerParams& g, const LayerActivations& a,
                    Tensor dx, const LayerGradBuffers& b, Tensor cu_seqlens, int64_t max_seqlen,
                    Tensor positions);

}  // namespace dapo::model::detail
