// The architecture hyper-parameters of the dense Qwen decoders dapo runs,
// Qwen2 / Qwen2.5 (model_type qwen2) and Qwen3 (qwen3), read from an HF
// `config.json` of transformers 4.x (`rope_theta` at the top level) or 5.x
// (`rope_parameters: {rope_theta, rope_type}`). Anything dapo cannot run
// exactly (another model_type, sliding-window attention, another
// activation, rope scaling) is refused with a message naming the file and
// the key, never silently approximated.
//
// What Qwen3 changes (the rest is Qwen2's layer): an RMSNorm over head_dim
// on every q and k head before RoPE (q_norm, k_norm), q/k/v biases only
// where attention_bias says so (false in the released models), and a
// head_dim of its own, so that q_proj is (heads * head_dim, hidden) and
// o_proj its transpose, not square (Qwen3-32B: 64 x 128 = 8,192 against
// 5,120).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dapo::model {

enum class ModelType : uint8_t {
  qwen2,  // Qwen2, Qwen2.5
  qwen3,  // Qwen3 dense
};
const char* model_type_name(ModelType t);  // HF's model_type: "qwen2", "qwen3"

struct Qwen2Config {
  ModelType model_type = ModelType::qwen2;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;           // C
  int64_t intermediate_size = 0;     // I
  int64_t num_hidden_layers = 0;     // L
  int64_t num_attention_heads = 0;   // Hq
  int64_t num_key_value_heads = 0;   // Hkv (grouped-query attention)
  int64_t head_dim = 0;              // D: C / Hq for qwen2, config.json's head_dim (default 128) for qwen3
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e6;
  bool tie_word_embeddings = false;  // lm_head shares embed_tokens.weight
  bool attention_bias = true;        // q/k/v have biases (qwen2: always; qwen3: attention_bias, which adds o_proj's)
  std::vector<int64_t> eos_token_ids;  // from config.json's eos_token_id (int or list)
  int64_t bos_token_id = -1;           // -1: none
  std::string torch_dtype;             // informational ("bfloat16", ...)

  // Qwen3's per-head RMSNorm of q and k before RoPE (q_norm, k_norm).
  bool qk_norm() const { return model_type == ModelType::qwen3; }
  // Qwen3's attention_bias also gives o_proj a bias; Qwen2's o_proj has none.
  bool o_proj_bias() const { return model_type == ModelType::qwen3 && attention_bias; }
};

// Parses config.json text; `origin` (a path) names the file in errors.
// Throws UserError for missing/invalid keys and unsupported features.
Qwen2Config parse_qwen2_config(const std::string& json_text, const std::string& origin);
Qwen2Config load_qwen2_config(const std::string& path);

// The config as HF config.json text (model_type qwen2 or qwen3,
// architectures Qwen2ForCausalLM or Qwen3ForCausalLM, hidden_act silu,
// rope_theta at the top level), which transformers 4.x and 5.x both load.
std::string qwen2_config_to_json(const Qwen2Config& config);

// Checks that the model can be split over `tp` ranks (heads, KV heads,
// vocabulary and intermediate size divisible as needed; KV heads replicated
// when tp > Hkv, which needs tp % Hkv == 0). Throws UserError naming
// parallel.tp.
void check_tp_compatible(const Qwen2Config& config, int64_t tp);

}  // namespace dapo::model
