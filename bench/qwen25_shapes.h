// Random-weight Qwen2.5 and Qwen3 shapes for the GPU benchmarks: the
// released config.json files, as bench/peers/shapes.py has them.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dapo/model/param_spec.h"
#include "dapo/model/param_store.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::bench {

// Qwen2.5 "0.5b", "1.5b" or "7b", or Qwen3 "qwen3-0.6b", "qwen3-1.7b",
// "qwen3-4b" or "qwen3-8b"; anything else ends the program (exit 2).
inline model::Qwen2Config qwen25(const std::string& size, const char* program) {
  model::Qwen2Config c;
  c.vocab_size = 151936;
  c.max_position_embeddings = 32768;
  c.rope_theta = 1e6;
  c.rms_norm_eps = 1e-6;
  if (size.rfind("qwen3-", 0) == 0) {  // head_dim 128, 8 KV heads, q/k norms, no biases
    c.model_type = model::ModelType::qwen3;
    c.attention_bias = false;
    c.head_dim = 128;
    c.num_key_value_heads = 8;
    c.tie_word_embeddings = size != "qwen3-8b";
    if (size == "qwen3-0.6b") c.hidden_size = 1024, c.intermediate_size = 3072, c.num_hidden_layers = 28, c.num_attention_heads = 16;
    else if (size == "qwen3-1.7b") c.hidden_size = 2048, c.intermediate_size = 6144, c.num_hidden_layers = 28, c.num_attention_heads = 16;
    else if (size == "qwen3-4b") c.hidden_size = 2560, c.intermediate_size = 9728, c.num_hidden_layers = 36, c.num_attention_heads = 32;
    else if (size == "qwen3-8b") c.hidden_size = 4096, c.intermediate_size = 12288, c.num_hidden_layers = 36, c.num_attention_heads = 32;
    else {
      std::fprintf(stderr, "%s: model qwen3-0.6b, qwen3-1.7b, qwen3-4b or qwen3-8b, not '%s'\n", program, size.c_str());
      std::exit(2);
    }
    return c;
  }
  if (size == "0.5b") {
    c.hidden_size = 896, c.intermediate_size = 4864, c.num_hidden_layers = 24;
    c.num_attention_heads = 14, c.num_key_value_heads = 2, c.tie_word_embeddings = true;
  } else if (size == "1.5b") {
    c.hidden_size = 1536, c.intermediate_size = 8960, c.num_hidden_layers = 28;
    c.num_attention_heads = 12, c.num_key_value_heads = 2, c.tie_word_embeddings = true;
  } else if (size == "7b") {
    c.hidden_size = 3584, c.intermediate_size = 18944, c.num_hidden_layers = 28;
    c.num_attention_heads = 28, c.num_key_value_heads = 4, c.tie_word_embeddings = false;
  } else {
    std::fprintf(stderr, "%s: model 0.5b, 1.5b or 7b, not '%s'\n", program, size.c_str());
    std::exit(2);
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

inline int64_t parameters(const model::Qwen2Config& c) {
  int64_t n = 0;
  for (const model::ParamSpec& s : model::qwen2_param_specs(c)) {
    int64_t k = 1;
    for (int64_t d : s.shape) k *= d;
    n += k;
  }
  return n;
}

// HF's initialisation as the benchmarks draw it: weights of std 0.02,
// zero biases, unit norm weights.
inline model::RandomInit hf_like_init() {
  model::RandomInit init;
  init.weight_scale = 0.02f * 1.7320508f;  // uniform of std 0.02
  init.bias_scale = 0.0f;
  init.norm_scale = 0.0f;
  return init;
}

// The bytes one decode step reads besides the KV cache: every bf16 weight
// once, the embedding only when the LM head is it (otherwise only B rows).
inline double decode_weight_bytes(const model::Qwen2Config& c) {
  double bytes = 2.0 * double(parameters(c));
  if (!c.tie_word_embeddings) bytes -= 2.0 * double(c.vocab_size * c.hidden_size);
  return bytes;
}

// KV-cache bytes of one position over all layers (bf16 k and v).
inline double kv_bytes_per_position(const model::Qwen2Config& c) {
  return double(c.num_hidden_layers) * 2.0 * double(c.num_key_value_heads * c.head_dim) * 2.0;
}

// HBM bandwidth as specified for the card (bytes/s); 0 when unknown.
inline double spec_bandwidth(const std::string& gpu_name) {
  if (gpu_name.find("H200") != std::string::npos) return 4.8e12;
  if (gpu_name.find("H100") != std::string::npos) return 3.35e12;
  return 0;
}

}  // namespace dapo::bench
