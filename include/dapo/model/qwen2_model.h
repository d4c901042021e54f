// The Qwen2 / Qwen3 decoder, tensor-parallel in the Megatron-LM layout, over
// the parameters of one ParamStore and the tp Comm of the rank grid:
//
//   embed_tokens (vocab-parallel) -> reduce_from_tp
//   per layer:
//     input_layernorm -> copy_to_tp -> q/k/v column-parallel (+bias, local
//     heads) -> [Qwen3: q_norm, k_norm per head] -> RoPE -> causal GQA
//     attention -> o_proj row-parallel -> reduce_from_tp -> + residual
//     post_attention_layernorm -> copy_to_tp -> gate/up column-parallel ->
//     SwiGLU -> down_proj row-parallel -> reduce_from_tp -> + residual
//   model.norm -> copy_to_tp -> lm_head (vocab-parallel) -> log-prob and
//   entropy of the targets, vocab-parallel (no logits are gathered).
//
// With tp = 1 every mapping is a copy. When tp > Hkv the KV heads are
// replicated: the tp/Hkv ranks holding one KV head form a "KV replica
// group" whose k/v gradients are summed. Qwen3's q_norm and k_norm weights
// are whole on every rank but each rank's heads give only part of their
// gradient: the backward sums it over tp.
//
// Memory: nothing is allocated with malloc on the hot path. Saved
// activations and temporaries come from the activation arena the caller
// passes (`act`); the ops' own temporaries come from ctx.scratch, which must
// hold at least scratch_bytes(...) (see below). Ops are reached only through
// dapo::ops and collectives only through Comm and the mappings, so the same
// code runs on the CUDA backend once those have device paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/model/activations.h"
#include "dapo/model/param_store.h"
#include "dapo/ops/context.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/sampling.h"
#include "dapo/parallel/comm.h"

namespace dapo::model {

namespace detail {
class Carver;
struct InferenceBuffers;
struct CachedBuffers;
}

struct ModelOptions {
  // Keep only each layer's input in the forward and recompute the layer in
  // the backward: saved activations fall from about
  // (4C + 2*hq*D + 2*hkv*D + 3*il + hq + 2)*T floats per layer (Qwen3:
  // (hq + hkv)*(D + 1)*T more for its q/k norms' inputs) to C*T, for
  // about one more forward (its down projection and all-reduce skipped).
  // Gradients are bit-identical to those without recomputation.
  bool activation_recompute = false;
  // The LM head runs over chunks of rows whose (rows, V/tp) logits take at
  // most this many bytes: a 20,480-token response never holds its full
  // logits (6 GB in bf16 for Qwen's 152k vocabulary). The backward
  // recomputes each chunk's logits (one more lm_head GEMM) instead of
  // keeping them. With fp32 logits (and their bf16 gradient) 1 GiB keeps
  // the chunks as long as 256 MiB of bf16 logits did: 1.5B update on an
  // H200, 4 x 4,096 tokens, 0.412 s at 256 MiB, 0.391 at 768, 0.387 at
  // 1,024 against 0.384 with bf16 logits at 256 MiB.
  size_t logits_chunk_bytes = size_t(1) << 30;
  // The LM head's logits in fp32 in training and scoring (the bf16 x bf16
  // -> fp32 product), as the sampler draws from fp32 logits: bf16 logits
  // step by 0.125 for |z| in [16, 32), so a token's log-prob could differ
  // from the sampler's by ~0.06 nats from the head alone. Their gradient is
  // rounded to the activations' dtype for the head's GEMMs. false: logits in
  // the activations' dtype (benchmarks measure what fp32 costs). No effect on
  // the CPU backend, whose activations are f32.
  bool fp32_head = true;
  // Batch-invariant forwards (rollout.exact_logprobs): every entry point runs
  // its ops under ops::Ctx::batch_invariant, so a token's log-prob is the
  // same bits in the engine's cached forward at any batch composition
  // (score_sampled) and in the trainer's packed forward, and the engine's
  // log-probs can serve as the old log-probs. tp <= 2; on GPUs with fp32
  // logits (fp32_head). Generation then keeps Qwen3's q/k norm inputs
  // apart and runs the trainer's norms.
  bool batch_invariant = false;
};

// The paged KV cache of generation, one k and one v pool per layer
// (layout of ops/kv_cache.h). Views only: the engine owns the memory.
struct KvCache {
  std::vector<Tensor> k;  // (L) of (num_blocks, block_size, hkv, D): f32 on the host, bf16 on a GPU
  std::vector<Tensor> v;  // (L) of (num_blocks, block_size, hkv, D)
};
// The cache's dtype on a device: f32 on the host, bf16 on a GPU (the
// model's activation dtype there).
inline DType kv_cache_dtype(Device device) { return device == Device::cpu ? DType::f32 : DType::bf16; }
// Bytes of a cache of `num_blocks` blocks for this rank (both pools, all
// layers, 256-byte alignment of each pool included), on `device`.
size_t kv_cache_bytes(const Qwen2Config& config, int64_t tp_size, int64_t num_blocks, int64_t block_size,
                      Device device = Device::cpu);
// Carves the pools from `arena`, in kv_cache_dtype(arena.device())
// (uninitialised: positions are written before they are read).
KvCache allocate_kv_cache(Arena& arena, const Qwen2Config& config, int64_t tp_size, int64_t num_blocks,
                          int64_t block_size);

// New tokens of B sequences for one generation step: a prefill (many
// tokens of a sequence), a decode step (one token per sequence), or both
// mixed. All i32, prepared by the engine.
struct CachedBatch {
  Tensor tokens;        // (N) i32 new token ids, packed by cu_seqlens_q
  Tensor positions;     // (N) i32 their positions in their sequences
  Tensor cu_seqlens_q;  // (B+1) i32 new tokens of sequence b: rows cu_seqlens_q[b]..cu_seqlens_q[b+1]-1
  Tensor last_rows;     // (B) i32 the row of each sequence's last new token (cu_seqlens_q[b+1] - 1);
                        //     every sequence must have at least one new token
  Tensor slot_mapping;  // (N) i32 flat cache slot of each new token (ops/kv_cache.h)
  Tensor block_table;   // (B, max_blocks) i32
  Tensor context_lens;  // (B) i32 cached positions of each sequence, new tokens included
  int64_t max_context_len = 0;  // >= every context_lens[b]; 0: read from context_lens (host batches only)
  // > 0: every sequence's context is its new tokens alone (no position
  // before them is cached) and this bounds their count per sequence.
  // Attention then runs over the new tokens' own q, k, v as packed causal
  // attention (ops::attention_forward, cu_seqlens_q; the training kernels)
  // instead of reading them back from the paged cache; the cache is still
  // written. The caller's promise: it is not checked on the device.
  int64_t fresh_max_seqlen = 0;
};

class Qwen2Model {
 public:
  // `params` holds the slices of tp rank tp.rank() of tp.size() (checked).
  // Collective over `tp`: splits the KV replica sub-communicator when
  // tp > Hkv. Both references must outlive the model.
  Qwen2Model(ParamStore& params, const parallel::Comm& tp, ModelOptions options = {});

  const Qwen2Config& config() const { return params_.config(); }
  const ModelOptions& options() const { return options_; }
  ParamStore& params() { return params_; }

  // ---- training --------------------------------------------------------
  // Per-token log-probability and entropy of batch.targets under
  // softmax(logits * inv_temperature), computed vocab-parallel: a row-max
  // all-reduce (MAX) and a partial-sum all-reduce (SUM) over tp, never the
  // (T, V) logits on one rank.
  // logprob, entropy: (T) f32, overwritten (the same on every tp rank).
  // saved: filled with views into `act` (allocated from act.mark() on);
  //   keep `act` and the batch tensors untouched until backward() is done.
  void forward_train(const ops::Ctx& ctx, Arena& act, const PackedBatch& batch, float inv_temperature,
                     Tensor logprob, Tensor entropy, Activations& saved) const;

  // The gradient of sum_t(dlogprob[t] * logprob[t] + dentropy[t] * entropy[t]),
  // ACCUMULATED (+=) into params().gradients() (micro-batches accumulate;
  // zero_grad() is the caller's). dlogprob, dentropy: (T) f32, identical on
  // every tp rank; either may be Tensor{} (zero). Releases the activations:
  // `act` is reset to saved.arena_mark before returning.
  //
  // grads_final (optional): called, in order, with offsets into the flat
  // gradient buffer such that elements [offset, end) will not be written
  // again by this backward (after the head, then after each layer); the
  // data-parallel buckets (optim/grad_buckets.h) start from there.
  using GradsFinal = std::function<void(int64_t offset)>;
  void backward(const ops::Ctx& ctx, Arena& act, const Activations& saved, Tensor dlogprob,
                Tensor dentropy, const GradsFinal& grads_final = {});

  // Scoring without gradients (old log-probs, evaluation): as forward_train
  // but keeping nothing; `act` is back where it was on return.
  void forward_logprob(const ops::Ctx& ctx, Arena& act, const PackedBatch& batch, float inv_temperature,
                       Tensor logprob, Tensor entropy) const;

  // The full logits (T, V) f32, overwritten, gathered over tp (for tests
  // and debugging; training never needs them). batch.targets is unused.
  void forward_logits(const ops::Ctx& ctx, Arena& act, const PackedBatch& batch, Tensor logits) const;

  // ---- generation ------------------------------------------------------
  // Runs the new tokens of every sequence, writes their k/v into the cache
  // (cache pools of this rank's hkv heads), and returns the logits of each
  // sequence's LAST new token: gathered to the whole vocabulary, or this
  // rank's vocabulary shard only (rollout/tp_sampling.h samples from the
  // shards without gathering them).
  // logits: (B, V) f32, overwritten (the same on every tp rank), or
  //   (B, V / tp) f32: ids [vocab_start, vocab_start + V / tp), no collective.
  void forward_cached(const ops::Ctx& ctx, Arena& act, const KvCache& cache, const CachedBatch& batch,
                      Tensor logits) const;

  // The same forward with the LM head fused into untruncated sampling
  // (ops/lm_head_sample.h; tp = 1 only): the tokens and log-probs that
  // forward_cached's logits and ops::sample_tokens would give, without the
  // logits. tokens, logprobs, rng_streams, rng_counters: (R); logit_rows as
  // sample_tokens' (rows over the B sequences of the batch). R = 0: the
  // forward alone (a prefill chunk that samples nothing), no head.
  struct CachedSample {
    Tensor tokens, logprobs, logit_rows, rng_streams, rng_counters;
    ops::SamplingParams params;
  };
  void forward_cached_sample(const ops::Ctx& ctx, Arena& act, const KvCache& cache, const CachedBatch& batch,
                             const CachedSample& sample) const;
  // Whether forward_cached_sample may and should replace forward_cached +
  // sample_tokens for these sampling parameters on ctx's backend (tp = 1,
  // ops::lm_head_sample_preferred).
  bool cached_sample_preferred(const ops::Ctx& ctx, const ops::SamplingParams& params) const;

  // The log-probs of sampled tokens under z = logits * inv_temperature, by
  // the trainer's own head routine (head_forward's), so that under
  // ModelOptions::batch_invariant they equal the trainer's bits.
  // logits: (B, vl) f32, this rank's vocabulary shard (forward_cached's
  // ungathered output). logit_rows: (R) i32 rows of logits, or Tensor{} for
  // the identity (R == B). tokens: (R) i32 global ids. logprobs: (R) f32,
  // overwritten. At tp > 1 every rank of the group calls it (two
  // all-reduces). Temporaries from `act`, released on return.
  void score_sampled(const ops::Ctx& ctx, Arena& act, Tensor logits, Tensor logit_rows, Tensor tokens,
                     float inv_temperature, Tensor logprobs) const;
  bool batch_invariant() const { return options_.batch_invariant; }

  // ---- memory planning -------------------------------------------------
  // Bytes of `act` that forward_train + backward need for T tokens (with
  // this model's recompute option), forward_logprob / forward_logits for T
  // tokens, and forward_cached for N new tokens of B sequences. Upper
  // bounds that include alignment.
  size_t train_activation_bytes(int64_t T) const;
  size_t inference_activation_bytes(int64_t T) const;
  size_t cached_activation_bytes(int64_t N, int64_t B) const;
  // Bytes of ctx.scratch the ops and mappings need: T tokens whose longest
  // sequence (or cached context) has max_len positions, `gathered_rows`
  // rows of full-vocabulary logits (T for forward_logits, B for
  // forward_cached, 0 for training) and `threads` OpenMP threads.
  size_t scratch_bytes(int64_t T, int64_t max_len, int64_t gathered_rows, int threads) const;

  // Local sizes of this rank (see activations.h).
  struct Dims {
    int64_t tp = 1;
    int64_t C = 0, D = 0, L = 0, V = 0;
    int64_t hq = 0, hkv = 0, il = 0, vl = 0;
    int64_t vocab_start = 0;  // first vocabulary id of this rank's shard
    float eps = 1e-6f, theta = 1e6f, scale = 1.0f;
    bool qk_norm = false;     // Qwen3's per-head q_norm and k_norm
    bool o_bias = false;      // Qwen3 with attention_bias: o_proj has a bias
    DType act = DType::f32;   // activations: f32 on the CPU backend, bf16 on CUDA
    DType head = DType::f32;  // the training/scoring head's logits (ModelOptions::fp32_head)
    int64_t head_rows = 0;    // rows of logits per chunk of the LM head (ModelOptions::logits_chunk_bytes)
  };
  const Dims& dims() const { return dims_; }

  // The memory plan of a model without its weights or a Comm: the same
  // counting carves as the methods above (which delegate to it), for
  // `dapo info --memory` and a run's fit check before anything is loaded.
  struct Plan {
    Dims dims;
    ModelOptions options;
    size_t train_activation_bytes(int64_t T) const;
    size_t inference_activation_bytes(int64_t T) const;
    size_t cached_activation_bytes(int64_t N, int64_t B) const;
    size_t scratch_bytes(int64_t T, int64_t max_len, int64_t gathered_rows, int threads) const;
  };
  // Tensor-parallel rank tp_rank of tp_size, activations in `act` (bf16 on
  // a GPU, f32 on the CPU).
  static Plan plan(const Qwen2Config& config, int64_t tp_size, int64_t tp_rank, DType act,
                   const ModelOptions& options = {});
  Plan plan() const { return {dims_, options_}; }

  // Views of one layer's tensors (parameters, or their gradients): norms
  // (C), q (hq*D, C) + bias, k/v (hkv*D, C) + bias, o (C, hq*D),
  // gate/up (il, C), down (C, il); Qwen3's q_norm, k_norm (D) and o bias
  // (C). Biases are undefined without attention_bias (bo: for Qwen2 too),
  // q_norm and k_norm for Qwen2.
  struct LayerParams {
    Tensor w_in, wq, bq, wk, bk, wv, bv, wo, bo, w_post, wg, wu, wd, q_norm, k_norm;
  };

 private:
  const parallel::Comm* kv_group() const;
  void embed(const ops::Ctx& ctx, Tensor x, Tensor tokens) const;
  // forward_cached up to the head's input: every layer over the batch's new
  // tokens (k/v into the cache), then model.norm of each sequence's last
  // new token into b.xn (B, C), copied to the tp ranks; returns b.xn. With
  // fold_head, where the step folds its norms (norm_fold.h) and every
  // sequence has one new token (N == B: last_rows is the identity), no
  // gather or norm runs: it returns the last down_proj's y = x *
  // model.norm.weight (N, C), and *norm the rows' sums of squares that
  // make it model.norm's output.
  Tensor cached_hidden(const ops::Ctx& ctx, const KvCache& cache, const CachedBatch& batch,
                       const detail::CachedBuffers& b, bool fold_head, ops::RowNorm* norm) const;
  // Runs every layer over b.x in place, ending with model.norm into b.xn.
  void run_layers(const ops::Ctx& ctx, const detail::InferenceBuffers& b, const PackedBatch& batch,
                  int64_t max_seqlen, const Tensor& norm_w) const;
  // Log-probs and entropies of the targets from the final norm's output
  // xn (T, C), chunk by chunk of dims().head_rows rows (logits carved from c).
  void head_forward(const ops::Ctx& ctx, detail::Carver& c, Tensor xn, Tensor targets, float inv_temperature,
                    Tensor lse, Tensor logprob, Tensor entropy) const;
  // Its backward: dxn (T, C) OVERWRITTEN (before copy_to_tp's backward),
  // the LM head's weight gradient ACCUMULATED.
  void head_backward(const ops::Ctx& ctx, detail::Carver& c, Tensor dxn, Tensor xn, Tensor targets,
                     float inv_temperature, Tensor lse, Tensor entropy, Tensor dlogprob, Tensor dentropy) const;
  // Log-probs, entropies and lse of the targets from one chunk of this
  // rank's logits (rows, vl): one streaming pass at tp = 1, the three
  // vocabulary-parallel steps otherwise, in row_max and sums (temporaries
  // of at least rows and (rows, 3), unused at tp = 1).
  // head_forward and score_sampled share it.
  void chunk_logprob(const ops::Ctx& ctx, Tensor logits, Tensor targets, float inv_temperature, Tensor logprob,
                     Tensor entropy, Tensor lse, Tensor row_max, Tensor sums) const;
  // ctx with this model's arithmetic (ModelOptions::batch_invariant).
  ops::Ctx op_ctx(const ops::Ctx& ctx) const;

  ParamStore& params_;
  const parallel::Comm& tp_;
  parallel::Comm kv_group_;  // the KV replica group (valid only when tp > Hkv)
  ModelOptions options_;
  Dims dims_;
  std::vector<LayerParams> weights_;  // (L) parameter views
  std::vector<LayerParams> grads_;    // (L) gradient views
};

}  // namespace dapo::model
