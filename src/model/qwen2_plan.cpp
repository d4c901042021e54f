// The model's buffer plans (see qwen2_plan.h) and the memory-planning
// methods of Qwen2Model, which run the same plans with a counting Carver.
#include "qwen2_plan.h"

#include <algorithm>

#include "dapo/ops/norm_fold.h"

namespace dapo::model {
namespace detail {

void carve_train_saved(Carver& c, const Dims& d, int64_t T, Activations& saved) {
  saved.layers.assign(size_t(d.L), LayerActivations{});
  for (LayerActivations& a : saved.layers) {
    if (!saved.recompute) a = carve_layer(c, d, T);
    a.x = c.act(d, {T, d.C});
  }
  saved.x_final = c.act(d, {T, d.C});
  saved.rstd_final = c.f32({T});
  saved.xn_final = c.act(d, {T, d.C});
  saved.lse = c.f32({T});
  saved.entropy = c.f32({T});
}

TrainForwardTemps carve_train_forward_temps(Carver& c, const Dims& d, int64_t T, bool recompute) {
  TrainForwardTemps t;
  t.partial = c.act(d, {T, d.C});
  if (recompute) t.layer = carve_layer(c, d, T);
  return t;
}

int64_t head_chunk_rows(const Dims& d, int64_t T) { return std::min<int64_t>(d.head_rows, std::max<int64_t>(T, 1)); }

HeadTemps carve_head_temps(Carver& c, const Dims& d, int64_t T) {
  HeadTemps t;
  t.rows = head_chunk_rows(d, T);
  t.logits = c.alloc(d.head, {t.rows, d.vl});
  if (d.tp == 1) return t;
  t.row_max = c.f32({t.rows});
  t.sums = c.f32({t.rows, 3});
  return t;
}

ScoreTemps carve_score_temps(Carver& c, const Dims& d, int64_t R) {
  ScoreTemps t;
  t.rows = head_chunk_rows(d, R);
  t.logits = c.f32({t.rows, d.vl});
  t.lse = c.f32({t.rows});
  t.entropy = c.f32({t.rows});
  if (d.tp == 1) return t;
  t.row_max = c.f32({t.rows});
  t.sums = c.f32({t.rows, 3});
  return t;
}

HeadBackwardTemps carve_head_backward_temps(Carver& c, const Dims& d, int64_t T) {
  HeadBackwardTemps t;
  t.rows = head_chunk_rows(d, T);
  t.logits = c.alloc(d.head, {t.rows, d.vl});
  t.dlogits = d.head == d.act ? t.logits : c.act(d, {t.rows, d.vl});
  return t;
}

TrainBackwardTemps carve_train_backward_temps(Carver& c, const Dims& d, int64_t T, bool recompute) {
  TrainBackwardTemps t;
  t.grads = carve_layer_grads(c, d, T);
  if (recompute) {
    t.partial = c.act(d, {T, d.C});
    t.layer = carve_layer(c, d, T);
  }
  return t;
}

InferenceBuffers carve_inference(Carver& c, const Dims& d, int64_t T) {
  InferenceBuffers b;
  b.x = c.act(d, {T, d.C});
  b.partial = c.act(d, {T, d.C});
  b.layer = carve_layer(c, d, T);
  b.rstd = c.f32({T});
  b.xn = c.act(d, {T, d.C});
  b.lse = c.f32({T});
  return b;
}

CachedBuffers carve_cached(Carver& c, const Dims& d, int64_t N, int64_t B, bool raw_qk) {
  CachedBuffers b;
  b.x = c.act(d, {N, d.C});
  b.partial = c.act(d, {N, d.C});
  b.layer = carve_layer(c, d, N, raw_qk);
  b.x_last = c.act(d, {B, d.C});
  b.rstd = c.f32({B});
  b.xn = c.act(d, {B, d.C});
  // The head's shard before the gather (sampling reads f32 logits); at
  // tp = 1 the head writes the caller's logits directly.
  if (d.vl < d.V) b.logits = c.f32({B, d.vl});
  b.ssq_in = c.f32({N, ops::norm_fold_parts(d.C)});
  b.ssq_post = c.f32({N, ops::norm_fold_parts(d.C)});
  return b;
}

}  // namespace detail

size_t Qwen2Model::train_activation_bytes(int64_t T) const { return plan().train_activation_bytes(T); }
size_t Qwen2Model::inference_activation_bytes(int64_t T) const { return plan().inference_activation_bytes(T); }
size_t Qwen2Model::cached_activation_bytes(int64_t N, int64_t B) const { return plan().cached_activation_bytes(N, B); }
size_t Qwen2Model::scratch_bytes(int64_t T, int64_t max_len, int64_t gathered_rows, int threads) const {
  return plan().scratch_bytes(T, max_len, gathered_rows, threads);
}

size_t Qwen2Model::Plan::train_activation_bytes(int64_t T) const {
  const Dims& dims_ = dims;
  detail::Carver c(nullptr);
  Activations saved;
  saved.recompute = options.activation_recompute;
  detail::carve_train_saved(c, dims_, T, saved);
  const size_t after_forward = c.mark();
  detail::carve_train_forward_temps(c, dims_, T, saved.recompute);
  detail::carve_head_temps(c, dims_, T);
  c.reset(after_forward);
  // backward: dx, then the head's gradients, released before the layers' temporaries.
  c.act(dims_, {T, dims_.C});
  const size_t head = c.mark();
  c.act(dims_, {T, dims_.C});
  detail::carve_head_backward_temps(c, dims_, T);
  c.reset(head);
  detail::carve_train_backward_temps(c, dims_, T, saved.recompute);
  return c.arena_bytes();
}

size_t Qwen2Model::Plan::inference_activation_bytes(int64_t T) const {
  const Dims& dims_ = dims;
  detail::Carver c(nullptr);
  detail::carve_inference(c, dims_, T);
  const size_t mark = c.mark();
  detail::carve_head_temps(c, dims_, T);    // forward_logprob
  c.reset(mark);
  if (dims_.vl < dims_.V) c.alloc(DType::f32, {T, dims_.vl});  // forward_logits' local shard (f32 at most)
  return c.arena_bytes();
}

size_t Qwen2Model::Plan::cached_activation_bytes(int64_t N, int64_t B) const {
  const Dims& dims_ = dims;
  detail::Carver c(nullptr);
  detail::carve_cached(c, dims_, N, B, options.batch_invariant);
  if (!options.batch_invariant) return c.arena_bytes();
  // score_sampled runs after forward_cached has released its buffers.
  detail::Carver score(nullptr);
  detail::carve_score_temps(score, dims_, B);
  return std::max(c.arena_bytes(), score.arena_bytes());
}

size_t Qwen2Model::Plan::scratch_bytes(int64_t T, int64_t max_len, int64_t gathered_rows, int threads) const {
  const Dims& dims_ = dims;
  const size_t f = sizeof(float);
  // attention_forward / paged_attention: one score row per thread;
  // attention_backward: (hq, T); gather_from_tp: the gathered (rows, V).
  const size_t attention = size_t(std::max<int64_t>(threads, 1)) * size_t(max_len) * f;
  const size_t attention_backward = size_t(dims_.hq) * size_t(T) * f;
  const size_t gather = size_t(gathered_rows) * size_t(dims_.V) * f;
  size_t need = std::max({attention, attention_backward, gather});
  if (dims_.act != DType::f32) {
    // The CUDA kernels' temporaries: the embedding backward's sort of
    // (id, row) pairs (keys, values, their sorted copies, cub's own
    // storage), and the fixed-order partial sums of the norm-weight and bias
    // gradients (at most 1024 row chunks of C or I floats); plus room for
    // the attention kernels' per-row statistics (counted above).
    const size_t sort = size_t(T) * 4 * sizeof(int32_t) + size_t(T) * 16 + (size_t(1) << 20);
    const size_t partials = size_t(1024) * size_t(std::max(dims_.C, dims_.il)) * f;
    need = std::max({need, sort, partials}) + (size_t(16) << 20);
    // paged_attention's split-KV partials (cuda/attention/paged_attention.cu caps them at
    // 64 MiB) when the cached forward runs (gathered_rows > 0).
    if (gathered_rows > 0) need += size_t(64) << 20;
  }
  return need + 2 * Arena::kAlign;
}

}  // namespace dapo::model
