// Helpers of the model tests (test_model and the MPI tests): tiny configs,
// packed host batches, the arenas a model call needs, the scalar loss the
// gradient tests differentiate, and a toy block allocator for the paged
// KV cache (the real one belongs to the rollout engine).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/model/qwen2_model.h"

namespace dapo::test {

// hidden 32, 4 heads of 8, 2 KV heads, 2 layers, intermediate 48, vocab 64.
inline model::Qwen2Config tiny_config(bool tied, int64_t kv_heads = 2, double rope_theta = 10000.0) {
  model::Qwen2Config c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 8;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = rope_theta;
  c.tie_word_embeddings = tied;
  return c;
}

// tiny_config as Qwen3: q_norm and k_norm, a head dim of its own (12: q_proj
// is (48, 32), not square) and q/k/v biases only where `bias` says.
inline model::Qwen2Config tiny_qwen3_config(bool tied, int64_t kv_heads = 2, bool bias = false) {
  model::Qwen2Config c = tiny_config(tied, kv_heads, 1e6);
  c.model_type = model::ModelType::qwen3;
  c.head_dim = 12;
  c.attention_bias = bias;
  return c;
}

// The tiny architectures the model tests run over: Qwen2 with untied and
// tied embeddings (rope_theta 1e4 and 1e6), Qwen3 without and with q/k/v
// biases (the latter tied).
enum class TinyArch { untied, tied, qwen3, qwen3_tied_bias };
inline constexpr TinyArch kTinyArchs[] = {TinyArch::untied, TinyArch::tied, TinyArch::qwen3, TinyArch::qwen3_tied_bias};
inline const char* tiny_arch_name(TinyArch a) {
  switch (a) {
    case TinyArch::untied: return "untied";
    case TinyArch::tied: return "tied";
    case TinyArch::qwen3: return "qwen3";
    case TinyArch::qwen3_tied_bias: return "qwen3_tied_bias";
  }
  return "?";
}
inline model::Qwen2Config tiny_arch_config(TinyArch a) {
  switch (a) {
    case TinyArch::untied: return tiny_config(false, 2, 1e4);
    case TinyArch::tied: return tiny_config(true, 2, 1e6);
    case TinyArch::qwen3: return tiny_qwen3_config(false);
    case TinyArch::qwen3_tied_bias: return tiny_qwen3_config(true, 2, true);
  }
  return {};
}

// A model of real proportions at a small size: head dim 128, 4 query heads
// on `kv_heads` KV heads, hidden 512, intermediate 1376, 2 layers, a
// vocabulary of 1000 (not a power of two), untied embeddings.
inline model::Qwen2Config mid_config(int64_t kv_heads, int64_t max_positions) {
  model::Qwen2Config c;
  c.vocab_size = 1000;
  c.hidden_size = 512;
  c.intermediate_size = 1376;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 128;
  c.max_position_embeddings = max_positions;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = false;
  return c;
}

// mid_config as Qwen3: 8 query heads of 128 (1,024) on a hidden size of
// 512, so that q_proj and o_proj are not square, 2 KV heads, q/k norms,
// no biases.
inline model::Qwen2Config mid_qwen3_config(int64_t max_positions) {
  model::Qwen2Config c = mid_config(2, max_positions);
  c.model_type = model::ModelType::qwen3;
  c.num_attention_heads = 8;
  c.attention_bias = false;
  return c;
}

// Scales that give O(1) activations and logits in the tiny model, with
// biases and norm weights well away from their defaults.
inline model::RandomInit tiny_init(uint64_t seed = 7) {
  model::RandomInit init;
  init.seed = seed;
  init.weight_scale = 0.3f;
  init.bias_scale = 0.2f;
  init.norm_scale = 0.3f;
  return init;
}

// A packed batch on the host: random tokens, positions restarting per
// sequence, next-token targets (the last token of a sequence scores a
// random id: callers that care give it a zero weight).
struct HostBatch {
  std::vector<int32_t> tokens, positions, cu_seqlens, targets;

  HostBatch() = default;
  HostBatch(const std::vector<int64_t>& lengths, int64_t vocab, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
    cu_seqlens.push_back(0);
    for (int64_t n : lengths) {
      const size_t start = tokens.size();
      for (int64_t p = 0; p < n; ++p) {
        tokens.push_back(id(gen));
        positions.push_back(int32_t(p));
      }
      for (int64_t p = 0; p < n; ++p) targets.push_back(p + 1 < n ? tokens[start + size_t(p) + 1] : id(gen));
      cu_seqlens.push_back(int32_t(tokens.size()));
    }
  }
  // Sequences [first, last) of this batch as a batch of their own.
  HostBatch sub(size_t first, size_t last) const {
    HostBatch b;
    b.cu_seqlens.push_back(0);
    for (size_t s = first; s < last; ++s) {
      for (int32_t i = cu_seqlens[s]; i < cu_seqlens[s + 1]; ++i) {
        b.tokens.push_back(tokens[size_t(i)]);
        b.positions.push_back(positions[size_t(i)]);
        b.targets.push_back(targets[size_t(i)]);
      }
      b.cu_seqlens.push_back(int32_t(b.tokens.size()));
    }
    return b;
  }
  int64_t T() const { return int64_t(tokens.size()); }
  int64_t B() const { return int64_t(cu_seqlens.size()) - 1; }
  model::PackedBatch view() {
    return {tensor_i32(tokens.data(), {T()}), tensor_i32(positions.data(), {T()}),
            tensor_i32(cu_seqlens.data(), {B() + 1}), tensor_i32(targets.data(), {T()})};
  }
};

// The arenas of one model call: activations and the ops' scratch.
struct Workspace {
  Arena act{size_t(8) << 20, Device::cpu, "test-activations"};
  Arena scratch{size_t(4) << 20, Device::cpu, "test-scratch"};
  ops::Ctx ctx;
  Workspace() { ctx.scratch = &scratch; }
};

// The scalar whose gradient the tests check: sum_t w[t]*logprob[t] + u[t]*entropy[t].
inline double weighted_loss(const std::vector<float>& w, const std::vector<float>& logprob,
                            const std::vector<float>& u, const std::vector<float>& entropy) {
  double s = 0;
  for (size_t t = 0; t < w.size(); ++t) s += double(w[t]) * logprob[t] + double(u[t]) * entropy[t];
  return s;
}

inline std::vector<float> zeros(int64_t n) { return std::vector<float>(size_t(n), 0.0f); }

inline std::vector<float> uniform_vector(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Runs forward_train + backward of sum(w*logprob + u*entropy); gradients
// accumulate into the model's store. Returns the logprob and entropy.
inline void train_step(model::Qwen2Model& m, Workspace& ws, HostBatch& batch, const std::vector<float>& w,
                       const std::vector<float>& u, std::vector<float>& logprob, std::vector<float>& entropy,
                       float inv_temperature = 1.0f) {
  const int64_t T = batch.T();
  logprob.assign(size_t(T), 0.0f);
  entropy.assign(size_t(T), 0.0f);
  model::Activations saved;
  m.forward_train(ws.ctx, ws.act, batch.view(), inv_temperature, tensor_f32(logprob.data(), {T}),
                  tensor_f32(entropy.data(), {T}), saved);
  std::vector<float> dw(w), du(u);
  m.backward(ws.ctx, ws.act, saved, tensor_f32(dw.data(), {T}), tensor_f32(du.data(), {T}));
}

inline std::vector<float> host_copy(const Tensor& t) {
  const float* p = t.ptr<float>();
  return std::vector<float>(p, p + t.numel());
}

// A toy allocator of KV-cache blocks: a shuffled free list, so block tables
// are far from the identity and tests see the indirection.
struct BlockPool {
  std::vector<int32_t> free_blocks;
  int64_t block_size;

  BlockPool(int64_t num_blocks, int64_t block_size_, uint32_t seed) : block_size(block_size_) {
    for (int32_t b = 0; b < int32_t(num_blocks); ++b) free_blocks.push_back(b);
    std::mt19937 gen(seed);
    std::shuffle(free_blocks.begin(), free_blocks.end(), gen);
  }
  // Grows `table` until it covers `length` positions.
  void reserve(std::vector<int32_t>& table, int64_t length) {
    while (int64_t(table.size()) * block_size < length) {
      EXPECT_FALSE(free_blocks.empty()) << "test KV pool exhausted";
      table.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
  }
  int32_t slot(const std::vector<int32_t>& table, int64_t position) const {
    return int32_t(table[size_t(position / block_size)] * block_size + position % block_size);
  }
};

// One generation step's metadata for forward_cached, built on the host.
struct HostCachedStep {
  std::vector<int32_t> tokens, positions, cu_seqlens_q, last_rows, slot_mapping, block_table, context_lens;
  int64_t max_blocks = 0;

  // new_tokens[b]: sequence b's new tokens; cached[b]: its positions already in the cache.
  HostCachedStep(const std::vector<std::vector<int32_t>>& new_tokens, const std::vector<int64_t>& cached,
                 const std::vector<std::vector<int32_t>>& tables, const BlockPool& pool) {
    cu_seqlens_q.push_back(0);
    for (const auto& t : tables) max_blocks = std::max<int64_t>(max_blocks, int64_t(t.size()));
    for (size_t b = 0; b < new_tokens.size(); ++b) {
      for (size_t i = 0; i < new_tokens[b].size(); ++i) {
        const int64_t pos = cached[b] + int64_t(i);
        tokens.push_back(new_tokens[b][i]);
        positions.push_back(int32_t(pos));
        slot_mapping.push_back(pool.slot(tables[b], pos));
      }
      cu_seqlens_q.push_back(int32_t(tokens.size()));
      last_rows.push_back(int32_t(tokens.size()) - 1);
      context_lens.push_back(int32_t(cached[b] + int64_t(new_tokens[b].size())));
      for (int64_t j = 0; j < max_blocks; ++j)
        block_table.push_back(j < int64_t(tables[b].size()) ? tables[b][size_t(j)] : 0);
    }
  }
  model::CachedBatch view() {
    const int64_t N = int64_t(tokens.size()), B = int64_t(last_rows.size());
    return {tensor_i32(tokens.data(), {N}),          tensor_i32(positions.data(), {N}),
            tensor_i32(cu_seqlens_q.data(), {B + 1}), tensor_i32(last_rows.data(), {B}),
            tensor_i32(slot_mapping.data(), {N}),    tensor_i32(block_table.data(), {B, max_blocks}),
            tensor_i32(context_lens.data(), {B})};
  }
};

// The logits (T, V) of a host model at every position of one sequence
// (row i predicts token i + 1): teacher-forced references for generation.
inline std::vector<float> host_logits(const model::Qwen2Model& m, const std::vector<int32_t>& tokens) {
  const int64_t T = int64_t(tokens.size()), V = m.config().vocab_size;
  std::vector<int32_t> toks = tokens, cu{0, int32_t(T)};
  std::vector<int32_t> pos(static_cast<size_t>(T)), tgt(static_cast<size_t>(T), 0);
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t);
  model::PackedBatch b;
  b.tokens = tensor_i32(toks.data(), {T});
  b.positions = tensor_i32(pos.data(), {T});
  b.cu_seqlens = tensor_i32(cu.data(), {2});
  b.targets = tensor_i32(tgt.data(), {T});
  b.max_seqlen = T;
  std::vector<float> logits(size_t(T * V));
  Arena act(m.inference_activation_bytes(T) + (size_t(8) << 20), Device::cpu, "ref-act");
  Arena scratch(m.scratch_bytes(T, T, T, 64) + (size_t(8) << 20), Device::cpu, "ref-scratch");
  ops::Ctx host;
  host.scratch = &scratch;
  m.forward_logits(host, act, b, tensor_f32(logits.data(), {T, V}));
  return logits;
}

}  // namespace dapo::test
