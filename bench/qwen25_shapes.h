// Random-weight Qwen2.5 shapes for the GPU benchmarks: the released
// config.json files, as ../shared/peers/shapes.py has them.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dapo/model/param_spec.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::bench {

// "0.5b", "1.5b" or "7b"; anything else ends the program (exit 2).
inline model::Qwen2Config qwen25(const std::string& size, const char* program) {
  model::Qwen2Config c;
  c.vocab_size = 151936;
  c.max_position_embeddings = 32768;
  c.rope_theta = 1e6;
  c.rms_norm_eps = 1e-6;
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

}  // namespace dapo::bench
