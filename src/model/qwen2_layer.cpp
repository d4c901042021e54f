// One Qwen2 decoder layer, forward and backward, in the Megatron layout
// (see qwen2_model.h): column-parallel q/k/v and gate/up, row-parallel o
// and down, the tp mappings at their edges, residual connections.
#include "qwen2_layer.h"

#include "dapo/ops/attention.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/swiglu.h"
#include "dapo/parallel/mappings.h"

namespace dapo::model::detail {

LayerActivations carve_layer(Carver& c, const Dims& d, int64_t T, bool raw_qk) {
  LayerActivations a;
  a.rstd1 = c.f32({T});
  a.xn1 = c.act(d, {T, d.C});
  a.q = c.act(d, {T, d.hq, d.D});
  a.k = c.act(d, {T, d.hkv, d.D});
  a.v = c.act(d, {T, d.hkv, d.D});
  a.attn = c.act(d, {T, d.hq, d.D});
  a.lse = c.f32({d.hq, T});
  a.x_mid = c.act(d, {T, d.C});
  a.rstd2 = c.f32({T});
  a.xn2 = c.act(d, {T, d.C});
  a.gate = c.act(d, {T, d.il});
  a.up = c.act(d, {T, d.il});
  a.h = c.act(d, {T, d.il});
  if (d.qk_norm && raw_qk) {
    a.q_raw = c.act(d, {T, d.hq, d.D});
    a.k_raw = c.act(d, {T, d.hkv, d.D});
    a.rstd_q = c.f32({T * d.hq});
    a.rstd_k = c.f32({T * d.hkv});
  }
  return a;
}

LayerGradBuffers carve_layer_grads(Carver& c, const Dims& d, int64_t T) {
  LayerGradBuffers b;
  b.dxn = c.act(d, {T, d.C});
  b.dh = c.act(d, {T, d.il});
  b.dgate = c.act(d, {T, d.il});
  b.dup = c.act(d, {T, d.il});
  b.dattn = c.act(d, {T, d.hq, d.D});
  b.dq = c.act(d, {T, d.hq, d.D});
  b.dk = c.act(d, {T, d.hkv, d.D});
  b.dv = c.act(d, {T, d.hkv, d.D});
  if (d.qk_norm) {
    b.dq_raw = c.act(d, {T, d.hq, d.D});
    b.dk_raw = c.act(d, {T, d.hkv, d.D});
  }
  return b;
}

void norm_input(const ops::Ctx& ctx, const Dims& d, const LayerParams& w, LayerActivations& a) {
  ops::rmsnorm_forward(ctx, a.xn1, a.rstd1, a.x, w.w_in, d.eps);
}

void layer_forward(const ops::Ctx& ctx, const parallel::Comm& tp, const Dims& d, const LayerParams& w,
                   LayerActivations& a, const NextNorm* next, Tensor partial, Tensor positions, Tensor cu_seqlens,
                   int64_t max_seqlen, const CacheStep* cache) {
  const int64_t T = a.x.size(0);
  // A folded norm has no all-reduce between product and norm to wait for:
  // tp = 1 only, and only over the paged cache (the fused ops that scale).
  DAPO_CHECK((!a.ssq1.defined() && !a.ssq2.defined() && (next == nullptr || !next->ssq.defined())) ||
                 (tp.size() == 1 && cache != nullptr),
             "layer_forward: folded norms need tp = 1 and a KV cache");
  // A generation prefill's row-parallel products at tp = 1 add the residual
  // in their epilogue, where the backend prefers it (matmul.h); the norms
  // after them are then plain ones. Training keeps the partial sums.
  const bool residual_in_product = cache != nullptr && tp.size() == 1 && ops::linear_residual_preferred(ctx, T);
  DAPO_CHECK(!(a.ssq2.defined() && w.bo.defined()), "layer_forward: o_proj's bias cannot be folded");
  // Attention block. copy_to_tp is the identity forward; its backward is
  // the all-reduce that sums the column-parallel input gradients.
  parallel::copy_to_tp_forward(ctx, tp, a.xn1, a.xn1);
  // q, k and v read one input: one op (on CUDA one launch for few rows).
  // Qwen3's per-head norms keep their inputs for the backward (q_raw,
  // k_raw) outside generation, where they run in place; batch-invariant
  // generation runs the trainer's norms (the fused ones reduce otherwise).
  const bool keep_raw = d.qk_norm && (cache == nullptr || ctx.batch_invariant);
  const ops::LinearSegment qkv[] = {{(keep_raw ? a.q_raw : a.q).reshape({T, d.hq * d.D}), w.wq, w.bq},
                                    {(keep_raw ? a.k_raw : a.k).reshape({T, d.hkv * d.D}), w.wk, w.bk},
                                    {a.v.reshape({T, d.hkv * d.D}), w.wv, w.bv}};
  if (cache == nullptr || keep_raw) {
    ops::linear_forward_multi(ctx, a.xn1, qkv);
    if (keep_raw) {
      ops::rmsnorm_forward(ctx, a.q.reshape({T * d.hq, d.D}), a.rstd_q, a.q_raw.reshape({T * d.hq, d.D}), w.q_norm,
                           d.eps);
      ops::rmsnorm_forward(ctx, a.k.reshape({T * d.hkv, d.D}), a.rstd_k, a.k_raw.reshape({T * d.hkv, d.D}),
                           w.k_norm, d.eps);
    }
  }
  if (cache == nullptr) {
    ops::rope_forward(ctx, a.q, a.q, positions, d.theta);
    ops::rope_forward(ctx, a.k, a.k, positions, d.theta);
    ops::attention_forward(ctx, a.attn, a.lse, a.q, a.k, a.v, cu_seqlens, max_seqlen, d.scale);
  } else {
    // The products, RoPE on q and k and the cache write of k and v: one op
    // (on CUDA one launch where the skinny kernel takes the products);
    // with the q/k norms run above, RoPE and the cache write alone (the
    // rotation is rope_forward's).
    if (keep_raw)
      ops::rope_kv_write(ctx, a.q, a.k, cache->k_cache, cache->v_cache, a.v, positions, cache->slot_mapping, d.theta,
                         ops::HeadNorm{});
    else
      ops::qkv_rope_kv_write(ctx, a.xn1, qkv, cache->k_cache, cache->v_cache, positions, cache->slot_mapping,
                             d.theta, ops::RowNorm{a.ssq1, d.eps}, ops::HeadNorm{w.q_norm, w.k_norm, d.eps});
    // A fresh prefill's keys are all in a.k and a.v: the flash kernels
    // (tiles of 64+ queries) instead of the paged kernel's decode-shaped
    // tiles of 8 query rows.
    if (cache->fresh_max_seqlen > 0)
      ops::attention_forward(ctx, a.attn, a.lse, a.q, a.k, a.v, cache->cu_seqlens_q, cache->fresh_max_seqlen,
                             d.scale);
    else
      ops::paged_attention(ctx, a.attn, a.q, cache->k_cache, cache->v_cache, cache->block_table,
                           cache->context_lens, cache->cu_seqlens_q, cache->max_context_len, d.scale);
  }
  if (a.ssq2.defined()) {
    // x_mid = x + attention, and post_attention_layernorm folded: o_proj's
    // epilogue leaves gate/up the rows' statistics to scale by.
    ops::linear_residual_fold(ctx, a.x_mid, a.xn2, a.ssq2, a.attn.reshape({T, d.hq * d.D}), w.wo, a.x, w.w_post);
  } else if (residual_in_product && !w.bo.defined()) {
    ops::linear_residual_forward(ctx, a.x_mid, a.attn.reshape({T, d.hq * d.D}), w.wo, a.x);
    ops::rmsnorm_forward(ctx, a.xn2, a.rstd2, a.x_mid, w.w_post, d.eps);
  } else {
    // A row-parallel bias is added once: by the first rank, before the sum.
    ops::linear_forward(ctx, partial, a.attn.reshape({T, d.hq * d.D}), w.wo, tp.rank() == 0 ? w.bo : Tensor{});
    parallel::reduce_from_tp_forward(ctx, tp, partial, partial);
    // x_mid = x + attention, and post_attention_layernorm of it, in one pass.
    ops::residual_rmsnorm_forward(ctx, a.x_mid, a.xn2, a.rstd2, a.x, partial, w.w_post, d.eps);
  }

  // MLP block.
  parallel::copy_to_tp_forward(ctx, tp, a.xn2, a.xn2);
  if (cache != nullptr) {
    // Generation keeps no activations for a backward pass: gate and up need
    // not reach memory (on CUDA one launch where the fused kernel takes it).
    ops::linear_swiglu_forward(ctx, a.h, a.gate, a.up, a.xn2, w.wg, w.wu, ops::RowNorm{a.ssq2, d.eps});
  } else {
    const ops::LinearSegment gate_up[] = {{a.gate, w.wg, Tensor{}}, {a.up, w.wu, Tensor{}}};
    ops::linear_forward_multi(ctx, a.xn2, gate_up);
    ops::swiglu_forward(ctx, a.h, a.gate, a.up);
  }
  if (next == nullptr) return;
  if (next->ssq.defined())
    return ops::linear_residual_fold(ctx, next->x, next->xn, next->ssq, a.h, w.wd, a.x_mid, next->weight);
  if (residual_in_product) {
    ops::linear_residual_forward(ctx, next->x, a.h, w.wd, a.x_mid);
    return ops::rmsnorm_forward(ctx, next->xn, next->rstd, next->x, next->weight, d.eps);
  }
  ops::linear_forward(ctx, partial, a.h, w.wd, Tensor{});
  parallel::reduce_from_tp_forward(ctx, tp, partial, partial);
  ops::residual_rmsnorm_forward(ctx, next->x, next->xn, next->rstd, a.x_mid, partial, next->weight, d.eps);
}

// Qwen3's q_norm / k_norm backward over a (T, H, D) gradient, one RMSNorm
// row per (token, head). The weight is shared by all heads, and this rank
// sees only its own heads (or, with replicated KV heads, only its query
// heads' part of dk): its weight gradient is summed over tp. The
// accumulated gradient is the same on every tp rank, so all ranks but the
// first start from zero and the all-reduce adds this micro-batch's parts
// to the first rank's running sum: no temporary, and each term counted once.
// The input gradient needs no reduction here: it is linear in dout, and the
// tp all-reduce of the input gradient (and the KV replica group's of dk)
// below sum the ranks' parts as they do without the norm.
namespace {

void head_norm_backward(const ops::Ctx& ctx, const parallel::Comm& tp, Tensor din, Tensor dweight, Tensor dout,
                        Tensor in, Tensor weight, Tensor rstd) {
  const int64_t rows = in.size(0) * in.size(1), D = in.size(2);
  if (tp.size() > 1 && tp.rank() != 0) ops::fill(ctx, dweight, 0.0);
  ops::rmsnorm_backward(ctx, din.reshape({rows, D}), dweight, dout.reshape({rows, D}), in.reshape({rows, D}), weight,
                        rstd);
  if (tp.size() > 1) tp.all_reduce(dweight, parallel::ReduceOp::sum, ctx.stream);
}

}  // namespace

// Why the norm weights need no reduction over tp: a norm's input (the
// residual stream) is the same on every tp rank, and so is the gradient of
// its output once copy_to_tp's backward has summed the column-parallel
// partial gradients. Every rank therefore computes the same, complete
// norm-weight gradient by itself; summing over tp would count it tp times.
void layer_backward(const ops::Ctx& ctx, const parallel::Comm& tp, const parallel::Comm* kv_group,
                    const Dims& d, const LayerParams& w, const LayerParams& g, const LayerActivations& a,
                    Tensor dx, const LayerGradBuffers& b, Tensor cu_seqlens, int64_t max_seqlen,
                    Tensor positions) {
  const int64_t T = dx.size(0);
  const auto F = false;

  // MLP: out = x_mid + reduce(down(h)); reduce_from_tp's backward is the identity.
  ops::linear_backward(ctx, b.dh, g.wd, Tensor{}, dx, a.h, w.wd);
  ops::swiglu_backward(ctx, b.dgate, b.dup, b.dh, a.gate, a.up);
  // The input gradient of gate and up summed by the second GEMM (beta = 1).
  ops::matmul(ctx, b.dxn, b.dgate, w.wg, F, F, 1.0f, 0.0f);
  ops::matmul(ctx, b.dxn, b.dup, w.wu, F, F, 1.0f, 1.0f);
  ops::linear_backward(ctx, Tensor{}, g.wg, Tensor{}, b.dgate, a.xn2, w.wg);
  ops::linear_backward(ctx, Tensor{}, g.wu, Tensor{}, b.dup, a.xn2, w.wu);
  parallel::copy_to_tp_backward(ctx, tp, b.dxn, b.dxn);
  // dx += d(norm input): now d(x_mid).
  ops::residual_rmsnorm_backward(ctx, dx, g.w_post, b.dxn, a.x_mid, w.w_post, a.rstd2);

  // Attention: x_mid = x + reduce(o_proj(attn)).
  ops::linear_backward(ctx, b.dattn.reshape({T, d.hq * d.D}), g.wo, g.bo, dx,
                       a.attn.reshape({T, d.hq * d.D}), w.wo);
  ops::attention_backward(ctx, b.dq, b.dk, b.dv, b.dattn, a.q, a.k, a.v, a.attn, a.lse, cu_seqlens, max_seqlen,
                          d.scale);
  ops::rope_backward(ctx, b.dq, b.dq, positions, d.theta);
  ops::rope_backward(ctx, b.dk, b.dk, positions, d.theta);
  if (d.qk_norm) {
    head_norm_backward(ctx, tp, b.dq_raw, g.q_norm, b.dq, a.q_raw, w.q_norm, a.rstd_q);
    head_norm_backward(ctx, tp, b.dk_raw, g.k_norm, b.dk, a.k_raw, w.k_norm, a.rstd_k);
  }
  const Tensor dq2 = (d.qk_norm ? b.dq_raw : b.dq).reshape({T, d.hq * d.D});
  const Tensor dk2 = (d.qk_norm ? b.dk_raw : b.dk).reshape({T, d.hkv * d.D});
  const Tensor dv2 = b.dv.reshape({T, d.hkv * d.D});
  // Input gradient first, from this rank's own dk/dv: with replicated KV
  // heads each replica's dk covers only its own query heads, and the tp
  // all-reduce below adds the replicas' parts exactly once.
  ops::matmul(ctx, b.dxn, dq2, w.wq, F, F, 1.0f, 0.0f);
  ops::matmul(ctx, b.dxn, dk2, w.wk, F, F, 1.0f, 1.0f);
  ops::matmul(ctx, b.dxn, dv2, w.wv, F, F, 1.0f, 1.0f);
  // The weight gradient needs the whole dk/dv of the head: summed over the
  // replica group here, on this micro-batch's activation gradient (not on
  // the accumulated weight gradient, which would re-add earlier micro-batches).
  if (kv_group != nullptr) {
    kv_group->all_reduce(dk2, parallel::ReduceOp::sum, ctx.stream);
    kv_group->all_reduce(b.dv, parallel::ReduceOp::sum, ctx.stream);
  }
  ops::linear_backward(ctx, Tensor{}, g.wq, g.bq, dq2, a.xn1, w.wq);
  ops::linear_backward(ctx, Tensor{}, g.wk, g.bk, dk2, a.xn1, w.wk);
  ops::linear_backward(ctx, Tensor{}, g.wv, g.bv, dv2, a.xn1, w.wv);
  parallel::copy_to_tp_backward(ctx, tp, b.dxn, b.dxn);
  ops::residual_rmsnorm_backward(ctx, dx, g.w_in, b.dxn, a.x, w.w_in, a.rstd1);  // now d(x)
}

}  // namespace dapo::model::detail
