// Generation forward over the paged KV cache: new tokens of many sequences
// at once (prefill chunks and single decode tokens alike), logits of each
// sequence's last new token, gathered to the whole vocabulary or left in
// this rank's vocabulary shard.
#include "dapo/model/qwen2_model.h"

#include <algorithm>

#include "dapo/ops/embedding.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/parallel/mappings.h"
#include "qwen2_plan.h"

namespace dapo::model {
namespace {

int64_t local_kv_heads(const Qwen2Config& c, int64_t tp_size) {
  DAPO_CHECK(tp_size >= 1, "tp size ", tp_size);
  return tp_size > c.num_key_value_heads ? 1 : c.num_key_value_heads / tp_size;
}

void check_i32(const Tensor& t, int ndim, const char* what) {
  DAPO_CHECK(t.dtype == DType::i32 && t.ndim == ndim, what, " must be a ", ndim, "-d i32 tensor, got ",
             dtype_name(t.dtype), " ", t.shape_string());
}

// The batch's tensors describe N new tokens of B sequences, over a cache of
// the model's L layers.
void check_cached_batch(const CachedBatch& batch, const KvCache& cache, int64_t L) {
  check_i32(batch.tokens, 1, "batch.tokens");
  check_i32(batch.positions, 1, "batch.positions");
  check_i32(batch.cu_seqlens_q, 1, "batch.cu_seqlens_q");
  check_i32(batch.last_rows, 1, "batch.last_rows");
  check_i32(batch.slot_mapping, 1, "batch.slot_mapping");
  check_i32(batch.block_table, 2, "batch.block_table");
  check_i32(batch.context_lens, 1, "batch.context_lens");
  const int64_t N = batch.tokens.shape[0];
  const int64_t B = batch.last_rows.shape[0];
  DAPO_CHECK(batch.positions.shape[0] == N && batch.slot_mapping.shape[0] == N, "positions and slot_mapping need ",
             N, " entries");
  DAPO_CHECK(batch.cu_seqlens_q.shape[0] == B + 1 && batch.context_lens.shape[0] == B &&
                 batch.block_table.shape[0] == B,
             "cu_seqlens_q, context_lens and block_table must describe the ", B, " sequences of last_rows");
  DAPO_CHECK(cache.k.size() == size_t(L) && cache.v.size() == size_t(L), "KV cache of ",
             cache.k.size(), " layers for a model of ", L);
}

}  // namespace

size_t kv_cache_bytes(const Qwen2Config& config, int64_t tp_size, int64_t num_blocks, int64_t block_size,
                      Device device) {
  const size_t pool = size_t(num_blocks * block_size * local_kv_heads(config, tp_size) * config.head_dim) *
                      dtype_size(kv_cache_dtype(device));
  const size_t aligned = (pool + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
  return size_t(2 * config.num_hidden_layers) * aligned + Arena::kAlign;
}

KvCache allocate_kv_cache(Arena& arena, const Qwen2Config& config, int64_t tp_size, int64_t num_blocks,
                          int64_t block_size) {
  DAPO_CHECK(num_blocks >= 1 && block_size >= 1, "KV cache of ", num_blocks, " blocks of ", block_size);
  const int64_t hkv = local_kv_heads(config, tp_size);
  KvCache cache;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const DType dt = kv_cache_dtype(arena.device());
    cache.k.push_back(arena.alloc(dt, {num_blocks, block_size, hkv, config.head_dim}));
    cache.v.push_back(arena.alloc(dt, {num_blocks, block_size, hkv, config.head_dim}));
  }
  return cache;
}

Tensor Qwen2Model::cached_hidden(const ops::Ctx& ctx, const KvCache& cache, const CachedBatch& batch,
                                 const detail::CachedBuffers& b, bool fold_head, ops::RowNorm* norm) const {
  const int64_t N = batch.tokens.shape[0];
  const int64_t B = batch.last_rows.shape[0];
  int64_t max_context_len = batch.max_context_len;
  if (max_context_len <= 0) {
    DAPO_CHECK(batch.context_lens.device == Device::cpu, "a device batch must set max_context_len");
    const int32_t* lens = batch.context_lens.ptr<int32_t>();
    for (int64_t i = 0; i < B; ++i) max_context_len = std::max<int64_t>(max_context_len, lens[i]);
  }

  embed(ctx, b.x, batch.tokens);
  const Tensor norm_w = params_.entry("model.norm.weight").compute;
  LayerActivations a = b.layer;
  a.x = b.x;
  if (dims_.L > 0) detail::norm_input(ctx, dims_, weights_[0], a);
  // Norms folded into the products around them where that is faster (a
  // decode step's few rows on CUDA, norm_fold.h); not at tp > 1, where an
  // all-reduce sits between the row-parallel products and the norm.
  const bool fold = tp_.size() == 1 && ops::norm_fold_preferred(ctx, N, dims_.C, dims_.il);
  // o_proj's bias (Qwen3 with attention_bias) has no place in the folded
  // product's epilogue: post_attention_layernorm then runs on its own.
  a.ssq2 = fold && !dims_.o_bias ? b.ssq_post : Tensor{};
  for (int64_t l = 0; l < dims_.L; ++l) {
    const detail::CacheStep step{cache.k[size_t(l)],  cache.v[size_t(l)],  batch.slot_mapping,
                                 batch.block_table,   batch.context_lens, batch.cu_seqlens_q,
                                 max_context_len,     batch.fresh_max_seqlen};
    // The last layer's fused norm (model.norm over all N rows) is not used:
    // the head normalises only the B rows it samples from, below.
    const detail::NextNorm next{b.x, a.xn1, a.rstd1, l + 1 < dims_.L ? weights_[size_t(l + 1)].w_in : norm_w,
                                fold ? b.ssq_in : Tensor{}};
    a.ssq1 = fold && l > 0 ? b.ssq_in : Tensor{};
    detail::layer_forward(ctx, tp_, dims_, weights_[size_t(l)], a, &next, b.partial, batch.positions,
                          batch.cu_seqlens_q, 0, &step);
  }
  if (fold_head && fold && N == B && dims_.L > 0) {
    // The last layer's fold already wrote model.norm's y and row sums of
    // squares for every row, and each row is its sequence's last (0.5B
    // decode step on an H100: the gather and the norm took 9 us).
    *norm = ops::RowNorm{b.ssq_in, dims_.eps};
    return a.xn1;
  }
  if (ctx.batch_invariant && dims_.L > 0) {
    // The trainer's model.norm: the last layer's fused residual + norm,
    // which wrote every row's norm into a.xn1 (on CUDA it normalises the
    // unrounded sum, a plain norm of the stored sum would not).
    ops::embedding_forward(ctx, b.xn, batch.last_rows, a.xn1, 0);
    parallel::copy_to_tp_forward(ctx, tp_, b.xn, b.xn);
    return b.xn;
  }
  // Only the last new token of each sequence is sampled from: pick its row
  // (embedding_forward is a row gather, here from the (N, C) hidden states)
  // before the final norm and the LM head, whose cost then scales with B.
  ops::embedding_forward(ctx, b.x_last, batch.last_rows, b.x, 0);
  ops::rmsnorm_forward(ctx, b.xn, b.rstd, b.x_last, norm_w, dims_.eps);
  parallel::copy_to_tp_forward(ctx, tp_, b.xn, b.xn);
  return b.xn;
}

void Qwen2Model::forward_cached(const ops::Ctx& ctx_in, Arena& act, const KvCache& cache, const CachedBatch& batch,
                                Tensor logits) const {
  const ops::Ctx ctx = op_ctx(ctx_in);
  check_cached_batch(batch, cache, dims_.L);
  const int64_t N = batch.tokens.shape[0];
  const int64_t B = batch.last_rows.shape[0];
  DAPO_CHECK(logits.dtype == DType::f32 && logits.ndim == 2 && logits.shape[0] == B && (logits.shape[1] == dims_.V || logits.shape[1] == dims_.vl),
             "forward_cached: logits ", logits.shape_string(), ", expected (", B, ", ", dims_.V, ") or this rank's (",
             B, ", ", dims_.vl, ")");
  const bool gathered = logits.shape[1] == dims_.V;

  ArenaScope scope(act);
  detail::Carver c(&act);
  const detail::CachedBuffers b = detail::carve_cached(c, dims_, N, B, options_.batch_invariant);
  cached_hidden(ctx, cache, batch, b, false, nullptr);
  // This rank's shard, or at tp = 1 the whole vocabulary: straight from the
  // head (a gather through a temporary would copy B x V floats twice: 0.14
  // ms of a 1.6 ms decode step of Qwen2.5-0.5B at batch 128 on an H100).
  if (!gathered || dims_.vl == dims_.V) {
    ops::linear_forward(ctx, logits, b.xn, params_.lm_head().compute, Tensor{});
    return;
  }
  ops::linear_forward(ctx, b.logits, b.xn, params_.lm_head().compute, Tensor{});
  parallel::gather_from_tp_forward(ctx, tp_, logits, b.logits);
}

void Qwen2Model::forward_cached_sample(const ops::Ctx& ctx_in, Arena& act, const KvCache& cache,
                                       const CachedBatch& batch, const CachedSample& sample) const {
  const ops::Ctx ctx = op_ctx(ctx_in);
  check_cached_batch(batch, cache, dims_.L);
  DAPO_CHECK(!ctx.batch_invariant, "forward_cached_sample under batch-invariant arithmetic: its log-probs are the ",
             "sampler's, not the trainer's (forward_cached, then score_sampled)");
  DAPO_CHECK(tp_.size() == 1, "forward_cached_sample: tp = ", tp_.size(), " (the fused head samples the whole vocabulary)");
  const int64_t N = batch.tokens.shape[0];
  const int64_t B = batch.last_rows.shape[0];
  ArenaScope scope(act);
  detail::Carver c(&act);
  const detail::CachedBuffers b = detail::carve_cached(c, dims_, N, B, options_.batch_invariant);
  ops::RowNorm norm;
  const Tensor hidden = cached_hidden(ctx, cache, batch, b, true, &norm);
  if (sample.tokens.numel() == 0) return;
  ops::lm_head_sample(ctx, sample.tokens, sample.logprobs, hidden, params_.lm_head().compute, sample.logit_rows,
                      sample.rng_streams, sample.rng_counters, sample.params, norm);
}

bool Qwen2Model::cached_sample_preferred(const ops::Ctx& ctx, const ops::SamplingParams& params) const {
  if (tp_.size() != 1 || options_.batch_invariant) return false;
  const Tensor w = params_.lm_head().compute;
  // The head's input rows have the weight's dtype and C columns.
  return ops::lm_head_sample_preferred(ctx, Tensor(nullptr, w.dtype, {1, dims_.C}, w.device), w, params);
}

void Qwen2Model::score_sampled(const ops::Ctx& ctx_in, Arena& act, Tensor logits, Tensor logit_rows, Tensor tokens,
                               float inv_temperature, Tensor logprobs) const {
  const ops::Ctx ctx = op_ctx(ctx_in);
  const int64_t R = tokens.numel();
  DAPO_CHECK(logits.dtype == DType::f32 && logits.ndim == 2 && logits.shape[1] == dims_.vl,
             "score_sampled: logits ", logits.shape_string(), " ", dtype_name(logits.dtype),
             ", expected f32 (B, ", dims_.vl, ")");
  check_i32(tokens, 1, "score_sampled: tokens");
  DAPO_CHECK(logprobs.dtype == DType::f32 && logprobs.ndim == 1 && logprobs.shape[0] == R, "score_sampled: logprobs ",
             logprobs.shape_string(), ", expected f32 (", R, ")");
  const bool gather = logit_rows.defined();
  if (gather)
    check_i32(logit_rows, 1, "score_sampled: logit_rows");
  DAPO_CHECK(gather ? logit_rows.shape[0] == R : logits.shape[0] == R, "score_sampled: ", R, " tokens for ",
             gather ? logit_rows.shape[0] : logits.shape[0], " rows");
  DAPO_CHECK(inv_temperature > 0, "score_sampled: inv_temperature ", inv_temperature);
  if (R == 0) return;
  ArenaScope scope(act);
  detail::Carver c(&act);
  const detail::ScoreTemps t = detail::carve_score_temps(c, dims_, R);
  for (int64_t r0 = 0; r0 < R; r0 += t.rows) {
    const int64_t r1 = std::min(R, r0 + t.rows), n = r1 - r0;
    // A row gather where rows repeat (the samples of a prefill's one row).
    const Tensor rows = gather ? t.logits.slice_rows(0, n) : logits.slice_rows(r0, r1);
    if (gather) ops::embedding_forward(ctx, rows, logit_rows.slice_rows(r0, r1), logits, 0);
    chunk_logprob(ctx, rows, tokens.slice_rows(r0, r1), inv_temperature, logprobs.slice_rows(r0, r1),
                  t.entropy.slice_rows(0, n), t.lse.slice_rows(0, n), t.row_max, t.sums);
  }
}

}  // namespace dapo::model
