// Private to the model module: which buffers each model entry point carves
// from the activation arena. The same functions run with a counting Carver
// for the memory-planning methods of Qwen2Model, so a plan can never
// disagree with what the model really allocates.
#pragma once

#include "qwen2_layer.h"

namespace dapo::model::detail {

// What forward_train keeps until backward: every layer's input x, and with
// recompute off the rest of each layer's activations; the head's tensors.
void carve_train_saved(Carver& c, const Dims& d, int64_t T, Activations& saved);

// forward_train's temporaries (released when it returns).
struct TrainForwardTemps {
  Tensor partial;          // (T, C) row-parallel output before reduction
  LayerActivations layer;  // recompute only: one layer's working set, reused by every layer
};
TrainForwardTemps carve_train_forward_temps(Carver& c, const Dims& d, int64_t T, bool recompute);

// Rows of one LM-head chunk for T tokens.
int64_t head_chunk_rows(const Dims& d, int64_t T);
// head_forward's temporaries: one chunk of logits (d.head), and for tp > 1
// its row max (rows) and partial sums (rows, 3).
struct HeadTemps {
  int64_t rows = 0;
  Tensor logits, row_max, sums;
};
HeadTemps carve_head_temps(Carver& c, const Dims& d, int64_t T);
// score_sampled's: one chunk of gathered logits (f32, whatever d.head is:
// they are the engine's), their row max and partial sums (tp > 1), the lse
// and entropies the head routine writes besides the log-probs.
struct ScoreTemps {
  int64_t rows = 0;
  Tensor logits, row_max, sums, lse, entropy;
};
ScoreTemps carve_score_temps(Carver& c, const Dims& d, int64_t R);
// head_backward's: one chunk of logits (recomputed, d.head), and their
// gradient in the activations' dtype: the logits themselves (in place) when
// that is d.head, else a buffer of its own.
struct HeadBackwardTemps {
  int64_t rows = 0;
  Tensor logits, dlogits;
};
HeadBackwardTemps carve_head_backward_temps(Carver& c, const Dims& d, int64_t T);

// backward's temporaries for the layers (after the head's are released).
struct TrainBackwardTemps {
  LayerGradBuffers grads;
  Tensor partial;          // recompute only
  LayerActivations layer;  // recompute only
};
TrainBackwardTemps carve_train_backward_temps(Carver& c, const Dims& d, int64_t T, bool recompute);

// forward_logprob / forward_logits: one working set reused by every layer.
struct InferenceBuffers {
  Tensor x;                // (T, C) residual stream, updated in place
  Tensor partial;          // (T, C)
  LayerActivations layer;
  Tensor rstd;             // (T)
  Tensor xn;               // (T, C)
  Tensor lse;              // (T)
};
InferenceBuffers carve_inference(Carver& c, const Dims& d, int64_t T);

// forward_cached: N new tokens, logits of B rows. raw_qk: Qwen3's q/k
// inputs of their norms kept apart (batch-invariant generation runs the
// trainer's norms, which do not run in place).
struct CachedBuffers {
  Tensor x;                // (N, C)
  Tensor partial;          // (N, C)
  LayerActivations layer;
  Tensor x_last;           // (B, C) the residual stream at each sequence's last new token
  Tensor rstd;             // (B)
  Tensor xn;               // (B, C)
  Tensor logits;           // (B, vl) at tp > 1 only: the head's shard before the gather
  Tensor ssq_in, ssq_post; // (N, norm_fold_parts(C)) f32: the folded norms' row statistics
};
CachedBuffers carve_cached(Carver& c, const Dims& d, int64_t N, int64_t B, bool raw_qk);

}  // namespace dapo::model::detail
