// config.json -> Qwen2Config, and back; refuses what dapo cannot run exactly.
#include "dapo/model/qwen2_config.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "dapo/core/error.h"

namespace dapo::model {
namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, const std::string& origin, int64_t fallback, bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) throw UserError(cat(origin, ": missing key '", key, "'"));
    return fallback;
  }
  if (!j[key].is_number_integer()) throw UserError(cat(origin, ": '", key, "' must be an integer, got ", j[key].dump()));
  const int64_t v = j[key].get<int64_t>();
  if (v <= 0) throw UserError(cat(origin, ": '", key, "' must be positive, got ", v));
  return v;
}

double get_double(const json& j, const char* key, const std::string& origin, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw UserError(cat(origin, ": '", key, "' must be a number, got ", j[key].dump()));
  const double v = j[key].get<double>();
  if (!(v > 0)) throw UserError(cat(origin, ": '", key, "' must be positive, got ", v));
  return v;
}

// A boolean key: absent or null gives `fallback`; anything but true or
// false is refused.
bool get_bool(const json& j, const char* key, const std::string& origin, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw UserError(cat(origin, ": '", key, "' must be true or false, got ", j[key].dump()));
  return j[key].get<bool>();
}

}  // namespace

const char* model_type_name(ModelType t) {
  switch (t) {
    case ModelType::qwen2: return "qwen2";
    case ModelType::qwen3: return "qwen3";
  }
  return "?";
}

Qwen2Config parse_qwen2_config(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UserError(cat(origin, ": not valid JSON: ", e.what()));
  }
  if (!j.is_object()) throw UserError(cat(origin, ": expected a JSON object"));
  const std::string model_type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  Qwen2Config c;
  if (model_type == "qwen2") c.model_type = ModelType::qwen2;
  else if (model_type == "qwen3") c.model_type = ModelType::qwen3;
  else
    throw UserError(cat(origin, ": model_type '", model_type,
                        "' is not supported (dapo runs qwen2: Qwen2, Qwen2.5; qwen3: the dense Qwen3 models)"));
  const bool qwen3 = c.model_type == ModelType::qwen3;
  const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string() ? j["hidden_act"].get<std::string>() : "silu";
  if (act != "silu") throw UserError(cat(origin, ": hidden_act '", act, "' is not supported (Qwen uses silu)"));
  if (j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean() && j["use_sliding_window"].get<bool>())
    throw UserError(cat(origin, ": use_sliding_window = true is not supported (full causal attention only)"));
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& lt = j["layer_types"];
    if (!lt.is_array()) throw UserError(cat(origin, ": layer_types must be a list, got ", lt.dump()));
    for (const json& t : lt)
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        throw UserError(cat(origin, ": layer_types holds ", t.dump(),
                            ", not supported (full causal attention only: every layer \"full_attention\")"));
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw UserError(cat(origin, ": rope_scaling ", j["rope_scaling"].dump(), " is not supported"));
  // Keys of other variants that change the computation: refused, never ignored.
  if (get_bool(j, "use_qk_norm", origin, qwen3) != qwen3)
    throw UserError(cat(origin, ": use_qk_norm = ", j["use_qk_norm"].dump(), " is not a ", model_type, " layout"));
  for (const char* gate : {"elementwise_attn_output_gate", "headwise_attn_output_gate"})
    if (get_bool(j, gate, origin, false)) throw UserError(cat(origin, ": ", gate, " = true is not a ", model_type, " layout"));
  // Qwen3's default is HF's (none); Qwen2 always has q/k/v biases.
  c.attention_bias = get_bool(j, "attention_bias", origin, !qwen3);
  if (!qwen3 && !c.attention_bias)
    throw UserError(cat(origin, ": attention_bias = false is not a qwen2 layout (Qwen2 has q/k/v biases)"));

  c.vocab_size = get_int(j, "vocab_size", origin, 151936, false);
  c.hidden_size = get_int(j, "hidden_size", origin, 0, true);
  c.intermediate_size = get_int(j, "intermediate_size", origin, 0, true);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", origin, 0, true);
  c.num_attention_heads = get_int(j, "num_attention_heads", origin, 0, true);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", origin, c.num_attention_heads, false);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", origin, qwen3 ? 40960 : 32768, false);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", origin, 1e-6);
  if (qwen3) {
    // Qwen3's head_dim is its own (HF's default 128), not hidden / heads.
    c.head_dim = get_int(j, "head_dim", origin, 128, false);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      throw UserError(cat(origin, ": hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
                          c.num_attention_heads));
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (j.contains("head_dim") && !j["head_dim"].is_null() && get_int(j, "head_dim", origin, 0, false) != c.head_dim)
      throw UserError(cat(origin, ": head_dim ", j["head_dim"].dump(), " differs from hidden_size / num_attention_heads = ",
                          c.head_dim, " (not a Qwen2 layout)"));
  }
  if (c.head_dim % 2 != 0) throw UserError(cat(origin, ": head_dim ", c.head_dim, " must be even for rotary embeddings"));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw UserError(cat(origin, ": num_attention_heads ", c.num_attention_heads,
                        " is not a multiple of num_key_value_heads ", c.num_key_value_heads));
  // transformers 5.x: rope_parameters {rope_theta, rope_type}; 4.x: rope_theta at the top level.
  c.rope_theta = get_double(j, "rope_theta", origin, 10000.0);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    const std::string type = rp.value("rope_type", "default");
    if (type != "default") throw UserError(cat(origin, ": rope_parameters.rope_type '", type, "' is not supported"));
    c.rope_theta = get_double(rp, "rope_theta", origin, c.rope_theta);
  }
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    else if (e.is_array())
      for (const auto& x : e) {
        if (!x.is_number_integer()) throw UserError(cat(origin, ": eos_token_id must hold integers, got ", e.dump()));
        c.eos_token_ids.push_back(x.get<int64_t>());
      }
    else throw UserError(cat(origin, ": eos_token_id must be an integer or a list, got ", e.dump()));
  }
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"].get<int64_t>();
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
  else if (j.contains("dtype") && j["dtype"].is_string()) c.torch_dtype = j["dtype"].get<std::string>();
  return c;
}

Qwen2Config load_qwen2_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(cat(path, ": cannot open the model configuration"));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_qwen2_config(ss.str(), path);
}

std::string qwen2_config_to_json(const Qwen2Config& c) {
  const bool qwen3 = c.model_type == ModelType::qwen3;
  nlohmann::ordered_json j;
  j["architectures"] = {qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"};
  j["model_type"] = model_type_name(c.model_type);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  if (qwen3) {
    j["head_dim"] = c.head_dim;
    j["attention_bias"] = c.attention_bias;
  }
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["use_sliding_window"] = false;
  j["attention_dropout"] = 0.0;
  j["rope_scaling"] = nullptr;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  j["torch_dtype"] = c.torch_dtype.empty() ? "float32" : c.torch_dtype;
  return j.dump(2) + "\n";
}

void check_tp_compatible(const Qwen2Config& c, int64_t tp) {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw UserError(cat("parallel.tp = ", tp, ": ", what));
  };
  need(tp >= 1, "must be at least 1");
  need(c.num_attention_heads % tp == 0, cat("num_attention_heads ", c.num_attention_heads, " is not divisible by tp"));
  need(c.vocab_size % tp == 0, cat("vocab_size ", c.vocab_size, " is not divisible by tp"));
  need(c.intermediate_size % tp == 0, cat("intermediate_size ", c.intermediate_size, " is not divisible by tp"));
  if (tp <= c.num_key_value_heads)
    need(c.num_key_value_heads % tp == 0, cat("num_key_value_heads ", c.num_key_value_heads, " is not divisible by tp"));
  else
    need(tp % c.num_key_value_heads == 0,
         cat("tp exceeds num_key_value_heads ", c.num_key_value_heads, " and is not a multiple of it (KV heads are replicated)"));
}

}  // namespace dapo::model
