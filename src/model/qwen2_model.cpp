// Qwen2Model: construction, the training forward/backward over packed
// batches, scoring without gradients and full logits. The layer itself is
// in qwen2_layer.cpp, generation in qwen2_cached.cpp, buffer plans in
// qwen2_plan.cpp.
#include "dapo/model/qwen2_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dapo/ops/cast.h"
#include "dapo/ops/embedding.h"
#include "dapo/ops/logprob.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/parallel/mappings.h"
#include "qwen2_layer.h"
#include "qwen2_plan.h"

namespace dapo::model {

using detail::Carver;

namespace {

// n < 0: any length.
void check_i32_vector(const Tensor& t, int64_t n, const char* what) {
  DAPO_CHECK(t.dtype == DType::i32 && t.ndim == 1 && (n < 0 || t.shape[0] == n), what, " must be ",
             n < 0 ? std::string("1-d") : cat("(", n, ")"), " i32, got ", dtype_name(t.dtype), " ",
             t.shape_string());
}

// Checks a packed batch and returns T.
int64_t check_batch(const PackedBatch& b, bool need_targets) {
  check_i32_vector(b.tokens, -1, "batch.tokens");
  const int64_t T = b.tokens.shape[0];
  check_i32_vector(b.positions, T, "batch.positions");
  check_i32_vector(b.cu_seqlens, -1, "batch.cu_seqlens");
  DAPO_CHECK(b.cu_seqlens.shape[0] >= 1, "batch.cu_seqlens needs B+1 >= 1 entries");
  if (need_targets) check_i32_vector(b.targets, T, "batch.targets");
  return T;
}

std::string layer_prefix(int64_t l) { return "model.layers." + std::to_string(l) + "."; }

// The batch's max_seqlen, or the longest sequence of a host cu_seqlens.
int64_t max_seqlen_of(const PackedBatch& b) {
  if (b.max_seqlen > 0) return b.max_seqlen;
  DAPO_CHECK(b.cu_seqlens.device == Device::cpu, "a device batch must set max_seqlen");
  const int32_t* cu = b.cu_seqlens.ptr<int32_t>();
  int64_t m = 0;
  for (int64_t i = 0; i + 1 < b.cu_seqlens.shape[0]; ++i) m = std::max<int64_t>(m, cu[i + 1] - cu[i]);
  return m;
}

}  // namespace

Qwen2Model::Plan Qwen2Model::plan(const Qwen2Config& c, int64_t p, int64_t tp_rank, DType act,
                                  const ModelOptions& options) {
  Plan plan;
  plan.options = options;
  Dims& d = plan.dims;
  d.tp = p;
  d.C = c.hidden_size;
  d.D = c.head_dim;
  d.L = c.num_hidden_layers;
  d.V = c.vocab_size;
  d.hq = c.num_attention_heads / p;
  d.hkv = p > c.num_key_value_heads ? 1 : c.num_key_value_heads / p;
  d.il = c.intermediate_size / p;
  d.vl = c.vocab_size / p;
  d.vocab_start = tp_rank * d.vl;
  d.eps = float(c.rms_norm_eps);
  d.theta = float(c.rope_theta);
  d.scale = float(1.0 / std::sqrt(double(c.head_dim)));  // HF: head_dim ** -0.5
  d.qk_norm = c.qk_norm();
  d.o_bias = c.o_proj_bias();
  d.act = act;
  d.head = options.fp32_head ? DType::f32 : act;
  // A chunk's logits, and in the backward their gradient beside them when
  // it takes another dtype.
  const size_t head_bytes = dtype_size(d.head) + (d.head != act ? dtype_size(act) : 0);
  d.head_rows = std::max<int64_t>(
      1, int64_t(options.logits_chunk_bytes / (size_t(std::max<int64_t>(d.vl, 1)) * head_bytes)));
  return plan;
}

Qwen2Model::Qwen2Model(ParamStore& params, const parallel::Comm& tp, ModelOptions options)
    : params_(params), tp_(tp), options_(options) {
  DAPO_CHECK(tp.valid() && tp.size() == params.tp_size() && tp.rank() == params.tp_rank(),
             "the parameter store holds tp rank ", params.tp_rank(), " of ", params.tp_size(),
             ", the tp Comm is rank ", tp.rank(), " of ", tp.size());
  const Qwen2Config& c = params.config();
  const int64_t p = tp.size();
  if (options.batch_invariant) {
    // The sampler draws from fp32 logits: the trainer's must be fp32 too.
    if (params.device() == Device::cuda && !options.fp32_head)
      throw UserError(cat("rollout.exact_logprobs = true needs train.fp32_logits = true on GPUs (the sampler's "
                          "logits are fp32)"));
    // Two ranks' partial sums add in one rounding whatever the order; MPI
    // sums three or more in an order it picks by message size, which the
    // engine's few rows and the trainer's many do not share.
    if (p > 2)
      throw UserError(cat("rollout.exact_logprobs = true at parallel.tp = ", p,
                          ": exact log-probs need tp <= 2 (the all-reduces of more ranks sum in an order that depends "
                          "on the message size); set rollout.exact_logprobs = false or parallel.tp <= 2"));
  }
  dims_ = plan(c, p, tp.rank(), params.compute_dtype(), options).dims;
  const Dims& d = dims_;

  const int64_t replicas = kv_replicas(c, p);
  if (replicas > 1) kv_group_ = tp.split(int(tp.rank() / replicas), tp.rank());

  weights_.resize(size_t(d.L));
  grads_.resize(size_t(d.L));
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    for (int which = 0; which < 2; ++which) {
      // Names the architecture lacks (biases without attention_bias, Qwen2's
      // q_norm) stay undefined: the ops take an undefined bias as none.
      auto get = [&](const char* name) {
        if (!params.contains(pre + name)) return Tensor{};
        const ParamEntry& e = params.entry(pre + name);
        return which == 0 ? e.compute : e.grad;
      };
      LayerParams& w = which == 0 ? weights_[size_t(l)] : grads_[size_t(l)];
      w.w_in = get("input_layernorm.weight");
      w.wq = get("self_attn.q_proj.weight");
      w.bq = get("self_attn.q_proj.bias");
      w.wk = get("self_attn.k_proj.weight");
      w.bk = get("self_attn.k_proj.bias");
      w.wv = get("self_attn.v_proj.weight");
      w.bv = get("self_attn.v_proj.bias");
      w.wo = get("self_attn.o_proj.weight");
      w.bo = get("self_attn.o_proj.bias");
      w.w_post = get("post_attention_layernorm.weight");
      w.wg = get("mlp.gate_proj.weight");
      w.wu = get("mlp.up_proj.weight");
      w.wd = get("mlp.down_proj.weight");
      w.q_norm = get("self_attn.q_norm.weight");
      w.k_norm = get("self_attn.k_norm.weight");
    }
  }
  DAPO_CHECK(weights_.empty() || weights_[0].wq.shape[0] == d.hq * d.D, "q_proj slice does not match");
  DAPO_CHECK(weights_.empty() || weights_[0].q_norm.defined() == d.qk_norm, "the parameters ",
             d.qk_norm ? "lack" : "have", " q_norm for a ", model_type_name(c.model_type), " model");
}

const parallel::Comm* Qwen2Model::kv_group() const { return kv_group_.valid() ? &kv_group_ : nullptr; }

// x (T, C) -> embed_tokens, vocab-parallel: each rank writes its own
// vocabulary's rows (zero rows elsewhere) and reduce_from_tp sums them.
void Qwen2Model::embed(const ops::Ctx& ctx, Tensor x, Tensor tokens) const {
  ops::embedding_forward(ctx, x, tokens, params_.entry("model.embed_tokens.weight").compute, dims_.vocab_start);
  parallel::reduce_from_tp_forward(ctx, tp_, x, x);
}

namespace {

// The chunk [r0, r1) of a (T, ...) tensor, or of a (T) one.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t r1) { return t.slice_rows(r0, r1); }

}  // namespace

void Qwen2Model::head_forward(const ops::Ctx& ctx, Carver& c, Tensor xn, Tensor targets, float inv_temperature,
                              Tensor lse, Tensor logprob, Tensor entropy) const {
  const int64_t T = xn.size(0);
  const Tensor w = params_.lm_head().compute;
  const size_t mark = c.mark();
  const detail::HeadTemps t = detail::carve_head_temps(c, dims_, T);
  for (int64_t r0 = 0; r0 < T; r0 += t.rows) {
    const int64_t r1 = std::min(T, r0 + t.rows), n = r1 - r0;
    Tensor logits = t.logits.slice_rows(0, n);
    ops::linear_forward(ctx, logits, rows_of(xn, r0, r1), w, Tensor{});
    chunk_logprob(ctx, logits, rows_of(targets, r0, r1), inv_temperature, rows_of(logprob, r0, r1),
                  rows_of(entropy, r0, r1), rows_of(lse, r0, r1), t.row_max, t.sums);
  }
  c.reset(mark);
}

void Qwen2Model::chunk_logprob(const ops::Ctx& ctx, Tensor logits, Tensor targets, float inv_temperature,
                               Tensor logprob, Tensor entropy, Tensor lse, Tensor row_max, Tensor sums) const {
  if (tp_.size() == 1) {  // one streaming pass over each row
    ops::logprob_entropy_forward(ctx, logprob, entropy, lse, logits, targets, 0, inv_temperature);
    return;
  }
  const int64_t n = logits.size(0);
  row_max = row_max.slice_rows(0, n);
  sums = sums.slice_rows(0, n);
  ops::logits_row_max(ctx, row_max, logits, inv_temperature);
  tp_.all_reduce(row_max, parallel::ReduceOp::max, ctx.stream);
  ops::logits_partial_sums(ctx, sums, logits, targets, row_max, dims_.vocab_start, inv_temperature);
  tp_.all_reduce(sums, parallel::ReduceOp::sum, ctx.stream);
  ops::logprob_entropy_finish(ctx, logprob, entropy, lse, sums, row_max);
}

ops::Ctx Qwen2Model::op_ctx(const ops::Ctx& ctx) const {
  ops::Ctx c = ctx;
  c.batch_invariant = c.batch_invariant || options_.batch_invariant;
  return c;
}

void Qwen2Model::head_backward(const ops::Ctx& ctx, Carver& c, Tensor dxn, Tensor xn, Tensor targets,
                               float inv_temperature, Tensor lse, Tensor entropy, Tensor dlogprob,
                               Tensor dentropy) const {
  const int64_t T = xn.size(0);
  const ParamEntry& head = params_.lm_head();
  const size_t mark = c.mark();
  const detail::HeadBackwardTemps t = detail::carve_head_backward_temps(c, dims_, T);
  for (int64_t r0 = 0; r0 < T; r0 += t.rows) {
    const int64_t r1 = std::min(T, r0 + t.rows), n = r1 - r0;
    Tensor logits = t.logits.slice_rows(0, n), dlogits = t.dlogits.slice_rows(0, n);
    const Tensor xr = rows_of(xn, r0, r1);
    ops::linear_forward(ctx, logits, xr, head.compute, Tensor{});  // recomputed, not kept
    ops::logprob_entropy_backward(ctx, dlogits, dlogprob.data ? rows_of(dlogprob, r0, r1) : Tensor{},
                                  dentropy.data ? rows_of(dentropy, r0, r1) : Tensor{}, logits,
                                  rows_of(targets, r0, r1), rows_of(lse, r0, r1), rows_of(entropy, r0, r1),
                                  dims_.vocab_start, inv_temperature);
    ops::linear_backward(ctx, rows_of(dxn, r0, r1), head.grad, Tensor{}, dlogits, xr, head.compute);
  }
  c.reset(mark);
}

void Qwen2Model::forward_train(const ops::Ctx& ctx_in, Arena& act, const PackedBatch& batch, float inv_temperature,
                               Tensor logprob, Tensor entropy, Activations& saved) const {
  const ops::Ctx ctx = op_ctx(ctx_in);
  const int64_t T = check_batch(batch, true);
  const int64_t max_seqlen = max_seqlen_of(batch);
  DAPO_CHECK_SHAPE(logprob, {T});
  DAPO_CHECK_SHAPE(entropy, {T});
  DAPO_CHECK(inv_temperature > 0, "inv_temperature ", inv_temperature);
  saved = Activations{};
  saved.batch = batch;
  saved.batch.max_seqlen = max_seqlen;
  saved.inv_temperature = inv_temperature;
  saved.recompute = options_.activation_recompute;
  saved.arena_mark = act.mark();

  Carver c(&act);
  detail::carve_train_saved(c, dims_, T, saved);
  const size_t temps = c.mark();
  detail::TrainForwardTemps tmp = detail::carve_train_forward_temps(c, dims_, T, saved.recompute);
  const Tensor norm_w = params_.entry("model.norm.weight").compute;

  // Layer l's input x and its input_layernorm (xn1, rstd1): written by the
  // embedding + norm for layer 0, then by the fused residual + norm at the
  // end of layer l-1. With recompute only x is kept; the norm goes to the
  // shared working set, which layer l reads before layer l writes layer l+1's.
  auto work = [&](int64_t l) -> LayerActivations& {
    return saved.recompute ? tmp.layer : saved.layers[size_t(l)];
  };
  if (dims_.L > 0) {
    LayerActivations& a0 = work(0);
    a0.x = saved.layers[0].x;
    embed(ctx, a0.x, batch.tokens);
    detail::norm_input(ctx, dims_, weights_[0], a0);
  } else {
    embed(ctx, saved.x_final, batch.tokens);
    ops::rmsnorm_forward(ctx, saved.xn_final, saved.rstd_final, saved.x_final, norm_w, dims_.eps);
  }
  for (int64_t l = 0; l < dims_.L; ++l) {
    LayerActivations& a = work(l);
    a.x = saved.layers[size_t(l)].x;
    detail::NextNorm next;
    if (l + 1 < dims_.L) {
      LayerActivations& b = work(l + 1);
      next = {saved.layers[size_t(l + 1)].x, b.xn1, b.rstd1, weights_[size_t(l + 1)].w_in, Tensor{}};
    } else {
      next = {saved.x_final, saved.xn_final, saved.rstd_final, norm_w, Tensor{}};
    }
    detail::layer_forward(ctx, tp_, dims_, weights_[size_t(l)], a, &next, tmp.partial, batch.positions,
                          batch.cu_seqlens, max_seqlen, nullptr);
  }
  parallel::copy_to_tp_forward(ctx, tp_, saved.xn_final, saved.xn_final);
  head_forward(ctx, c, saved.xn_final, batch.targets, inv_temperature, saved.lse, logprob, saved.entropy);
  ops::cast(ctx, entropy, saved.entropy);
  c.reset(temps);
}

void Qwen2Model::backward(const ops::Ctx& ctx_in, Arena& act, const Activations& saved, Tensor dlogprob,
                          Tensor dentropy, const GradsFinal& grads_final) {
  const ops::Ctx ctx = op_ctx(ctx_in);
  const PackedBatch& batch = saved.batch;
  DAPO_CHECK(saved.layers.size() == size_t(dims_.L) && saved.xn_final.data != nullptr,
             "backward without a forward_train of this model");
  const int64_t T = batch.tokens.shape[0];
  const int64_t max_seqlen = max_seqlen_of(batch);
  DAPO_CHECK(act.mark() >= saved.arena_mark, "the activation arena was reset since the forward");
  if (dlogprob.data) DAPO_CHECK_SHAPE(dlogprob, {T});
  if (dentropy.data) DAPO_CHECK_SHAPE(dentropy, {T});

  Carver c(&act);
  Tensor dx = c.act(dims_, {T, dims_.C});  // gradient of the residual stream, layer by layer
  {
    const size_t mark = c.mark();
    Tensor dxn = c.act(dims_, {T, dims_.C});
    head_backward(ctx, c, dxn, saved.xn_final, batch.targets, saved.inv_temperature, saved.lse, saved.entropy,
                  dlogprob, dentropy);
    parallel::copy_to_tp_backward(ctx, tp_, dxn, dxn);
    // Replicated: no reduction over tp (see layer_backward for why).
    const ParamEntry& norm = params_.entry("model.norm.weight");
    ops::rmsnorm_backward(ctx, dx, norm.grad, dxn, saved.x_final, norm.compute, saved.rstd_final);
    c.reset(mark);
  }
  // In HF order the layers come before model.norm (and an untied lm_head):
  // from here on only layers and the embedding are written. A tied
  // lm_head's gradient is the embedding's, at offset 0, final only at the end.
  if (grads_final) grads_final(params_.entry("model.norm.weight").offset);
  const detail::TrainBackwardTemps tmp = detail::carve_train_backward_temps(c, dims_, T, saved.recompute);
  for (int64_t l = dims_.L - 1; l >= 0; --l) {
    const LayerParams& w = weights_[size_t(l)];
    if (saved.recompute) {
      LayerActivations a = tmp.layer;
      a.x = saved.layers[size_t(l)].x;
      detail::norm_input(ctx, dims_, w, a);
      detail::layer_forward(ctx, tp_, dims_, w, a, nullptr, tmp.partial, batch.positions, batch.cu_seqlens,
                            max_seqlen, nullptr);
      detail::layer_backward(ctx, tp_, kv_group(), dims_, w, grads_[size_t(l)], a, dx, tmp.grads,
                             batch.cu_seqlens, max_seqlen, batch.positions);
    } else {
      detail::layer_backward(ctx, tp_, kv_group(), dims_, w, grads_[size_t(l)], saved.layers[size_t(l)], dx,
                             tmp.grads, batch.cu_seqlens, max_seqlen, batch.positions);
    }
    if (grads_final) grads_final(params_.entry(layer_prefix(l) + "input_layernorm.weight").offset);
  }
  // embed_tokens: reduce_from_tp's backward is the identity; each rank
  // scatters into the rows of its own vocabulary.
  ops::embedding_backward(ctx, params_.grad("model.embed_tokens.weight"), dx, batch.tokens, dims_.vocab_start);
  act.reset(saved.arena_mark);
}

// Runs the layers over b.x in place (inference: one working set for all).
void Qwen2Model::run_layers(const ops::Ctx& ctx, const detail::InferenceBuffers& b, const PackedBatch& batch,
                            int64_t max_seqlen, const Tensor& norm_w) const {
  LayerActivations a = b.layer;
  a.x = b.x;
  if (dims_.L == 0) {
    ops::rmsnorm_forward(ctx, b.xn, b.rstd, b.x, norm_w, dims_.eps);
    return;
  }
  detail::norm_input(ctx, dims_, weights_[0], a);
  for (int64_t l = 0; l < dims_.L; ++l) {
    const detail::NextNorm next = l + 1 < dims_.L
                                      ? detail::NextNorm{b.x, a.xn1, a.rstd1, weights_[size_t(l + 1)].w_in, Tensor{}}
                                      : detail::NextNorm{b.x, b.xn, b.rstd, norm_w, Tensor{}};
    detail::layer_forward(ctx, tp_, dims_, weights_[size_t(l)], a, &next, b.partial, batch.positions,
                          batch.cu_seqlens, max_seqlen, nullptr);
  }
}

void Qwen2Model::forward_logprob(const ops::Ctx& ctx_in, Arena& act, const PackedBatch& batch, float inv_temperature,
                                 Tensor logprob, Tensor entropy) const {
  const ops::Ctx ctx = op_ctx(ctx_in);
  const int64_t T = check_batch(batch, true);
  const int64_t max_seqlen = max_seqlen_of(batch);
  DAPO_CHECK_SHAPE(logprob, {T});
  DAPO_CHECK_SHAPE(entropy, {T});
  DAPO_CHECK(inv_temperature > 0, "inv_temperature ", inv_temperature);
  ArenaScope scope(act);
  Carver c(&act);
  detail::InferenceBuffers b = detail::carve_inference(c, dims_, T);
  embed(ctx, b.x, batch.tokens);
  run_layers(ctx, b, batch, max_seqlen, params_.entry("model.norm.weight").compute);
  parallel::copy_to_tp_forward(ctx, tp_, b.xn, b.xn);
  head_forward(ctx, c, b.xn, batch.targets, inv_temperature, b.lse, logprob, entropy);
}

void Qwen2Model::forward_logits(const ops::Ctx& ctx_in, Arena& act, const PackedBatch& batch, Tensor logits) const {
  const ops::Ctx ctx = op_ctx(ctx_in);
  const int64_t T = check_batch(batch, false);
  const int64_t max_seqlen = max_seqlen_of(batch);
  DAPO_CHECK_SHAPE(logits, {T, dims_.V});
  ArenaScope scope(act);
  Carver c(&act);
  detail::InferenceBuffers b = detail::carve_inference(c, dims_, T);
  embed(ctx, b.x, batch.tokens);
  run_layers(ctx, b, batch, max_seqlen, params_.entry("model.norm.weight").compute);
  parallel::copy_to_tp_forward(ctx, tp_, b.xn, b.xn);
  if (dims_.vl == dims_.V) {  // tp = 1, the whole vocabulary: no gather, no temporary
    ops::linear_forward(ctx, logits, b.xn, params_.lm_head().compute, Tensor{});
    return;
  }
  Tensor local = c.alloc(logits.dtype, {T, dims_.vl});
  ops::linear_forward(ctx, local, b.xn, params_.lm_head().compute, Tensor{});
  parallel::gather_from_tp_forward(ctx, tp_, logits, local);
}

}  // namespace dapo::model
