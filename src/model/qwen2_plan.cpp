// The model's buffer plans (see qwen2_plan.h) and the memory-planning
// methods of Qwen2Model, which run the same plans with a counting Carver.
#include "qwen2_plan.h"

#include <algorithm>

namespace dapo::model {
namespace detail {

void carve_train_saved(Carver& c, const Dims& d, int64_t T, Activations& saved) {
  saved.layers.assign(size_t(d.L), LayerActivations{});
  for (LayerActivations& a : saved.layers) {
    if (!saved.recompute) a = carve_layer(c, d, T);
    a.x = c.f32({T, d.C});
  }
  saved.x_final = c.f32({T, d.C});
  saved.rstd_final = c.f32({T});
  saved.xn_final = c.f32({T, d.C});
  saved.logits = c.f32({T, d.vl});
  saved.lse = c.f32({T});
  saved.entropy = c.f32({T});
}

TrainForwardTemps carve_train_forward_temps(Carver& c, const Dims& d, int64_t T, bool recompute) {
  TrainForwardTemps t;
  t.partial = c.f32({T, d.C});
  if (recompute) t.layer = carve_layer(c, d, T);
  return t;
}

void carve_head_temps(Carver& c, const Dims& d, int64_t T) {
  if (d.tp == 1) return;
  c.f32({T});
  c.f32({T, 3});
}

TrainBackwardTemps carve_train_backward_temps(Carver& c, const Dims& d, int64_t T, bool recompute) {
  TrainBackwardTemps t;
  t.grads = carve_layer_grads(c, d, T);
  if (recompute) {
    t.partial = c.f32({T, d.C});
    t.layer = carve_layer(c, d, T);
  }
  return t;
}

InferenceBuffers carve_inference(Carver& c, const Dims& d, int64_t T) {
  InferenceBuffers b;
  b.x = c.f32({T, d.C});
  b.partial = c.f32({T, d.C});
  b.layer = carve_layer(c, d, T);
  b.rstd = c.f32({T});
  b.xn = c.f32({T, d.C});
  b.logits = c.f32({T, d.vl});
  b.lse = c.f32({T});
  return b;
}

CachedBuffers carve_cached(Carver& c, const Dims& d, int64_t N, int64_t B) {
  CachedBuffers b;
  b.x = c.f32({N, d.C});
  b.partial = c.f32({N, d.C});
  b.layer = carve_layer(c, d, N);
  b.x_last = c.f32({B, d.C});
  b.rstd = c.f32({B});
  b.xn = c.f32({B, d.C});
  b.logits = c.f32({B, d.vl});
  return b;
}

}  // namespace detail

size_t Qwen2Model::train_activation_bytes(int64_t T) const {
  detail::Carver c(nullptr);
  Activations saved;
  saved.recompute = options_.activation_recompute;
  detail::carve_train_saved(c, dims_, T, saved);
  const size_t after_forward = c.mark();
  detail::carve_train_forward_temps(c, dims_, T, saved.recompute);
  detail::carve_head_temps(c, dims_, T);
  c.reset(after_forward);
  // backward: dx, then the head's gradients, released before the layers' temporaries.
  c.f32({T, dims_.C});
  const size_t head = c.mark();
  c.f32({T, dims_.vl});
  c.f32({T, dims_.C});
  c.reset(head);
  detail::carve_train_backward_temps(c, dims_, T, saved.recompute);
  return c.peak() + Arena::kAlign;  // the arena's mark may not be aligned when we start
}

size_t Qwen2Model::inference_activation_bytes(int64_t T) const {
  detail::Carver c(nullptr);
  detail::carve_inference(c, dims_, T);
  detail::carve_head_temps(c, dims_, T);
  return c.peak() + Arena::kAlign;
}

size_t Qwen2Model::cached_activation_bytes(int64_t N, int64_t B) const {
  detail::Carver c(nullptr);
  detail::carve_cached(c, dims_, N, B);
  return c.peak() + Arena::kAlign;
}

size_t Qwen2Model::scratch_bytes(int64_t T, int64_t max_len, int64_t gathered_rows, int threads) const {
  const size_t f = sizeof(float);
  // attention_forward / paged_attention: one score row per thread;
  // attention_backward: (hq, T); gather_from_tp: the gathered (rows, V).
  const size_t attention = size_t(std::max<int64_t>(threads, 1)) * size_t(max_len) * f;
  const size_t attention_backward = size_t(dims_.hq) * size_t(T) * f;
  const size_t gather = size_t(gathered_rows) * size_t(dims_.V) * f;
  return std::max({attention, attention_backward, gather}) + 2 * Arena::kAlign;
}

}  // namespace dapo::model
