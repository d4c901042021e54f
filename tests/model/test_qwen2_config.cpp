// config.json parsing (transformers 4.x and 5.x), refusals, and the tp split rules.
#include "dapo/model/qwen2_config.h"

#include <gtest/gtest.h>

#include <map>

#include "dapo/core/error.h"
#include "dapo/model/param_spec.h"

namespace dapo::model {
namespace {

// The shape of Qwen2.5-7B-Instruct's config.json (transformers 4.x form).
const char* kQwen25_7B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 152064})";

// Qwen3-32B's config.json as transformers 5.x writes it: head_dim 128 with
// 64 heads (8,192) against a hidden size of 5,120.
const char* kQwen3_32B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 25600,
  "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 40960, "max_window_layers": 64,
  "model_type": "qwen3", "num_attention_heads": 64, "num_hidden_layers": 2, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "sliding_window": null, "tie_word_embeddings": false, "transformers_version": "5.17.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

std::string error_of(const std::string& text) {
  try {
    parse_qwen2_config(text, "cfg.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen2Config, ParsesTransformers4Form) {
  const Qwen2Config c = parse_qwen2_config(kQwen25_7B, "cfg.json");
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.tie_word_embeddings);
  ASSERT_EQ(c.eos_token_ids.size(), 1u);
  EXPECT_EQ(c.eos_token_ids[0], 151645);
}

TEST(Qwen2Config, ParsesTransformers5RopeParameters) {
  const Qwen2Config c = parse_qwen2_config(
      R"({"model_type":"qwen2","hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,
          "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"tie_word_embeddings":true,
          "rope_parameters":{"rope_theta":5000.0,"rope_type":"default"},"eos_token_id":[3,4]})",
      "cfg.json");
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{3, 4}));
  // And it survives a round trip through the 4.x text we write.
  const Qwen2Config back = parse_qwen2_config(qwen2_config_to_json(c), "out.json");
  EXPECT_DOUBLE_EQ(back.rope_theta, 5000.0);
  EXPECT_EQ(back.eos_token_ids, c.eos_token_ids);
  EXPECT_EQ(back.num_key_value_heads, 2);
  EXPECT_TRUE(back.tie_word_embeddings);
}

TEST(Qwen2Config, RefusesWhatItCannotRun) {
  std::string base = kQwen25_7B;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(error_of(with("\"model_type\": \"qwen2\"", "\"model_type\": \"llama\"")).find("model_type 'llama'"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"use_sliding_window\": false", "\"use_sliding_window\": true")).find("use_sliding_window"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"")).find("hidden_act 'gelu'"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"use_cache\": true", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0}"))
                .find("rope_scaling"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"hidden_size\": 3584,", "")).find("cfg.json: missing key 'hidden_size'"), std::string::npos);
  EXPECT_NE(error_of(with("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 5")).find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(error_of("{not json").find("cfg.json: not valid JSON"), std::string::npos);
}

TEST(Qwen2Config, ParsesQwen3AndWritesItBack) {
  const Qwen2Config c = parse_qwen2_config(kQwen3_32B, "cfg.json");
  EXPECT_EQ(c.model_type, ModelType::qwen3);
  EXPECT_TRUE(c.qk_norm());
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias());
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_attention_heads * c.head_dim, 8192);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  const Qwen2Config back = parse_qwen2_config(qwen2_config_to_json(c), "out.json");
  EXPECT_EQ(qwen2_config_to_json(back), qwen2_config_to_json(c));
  EXPECT_EQ(back.model_type, ModelType::qwen3);
  EXPECT_EQ(back.head_dim, 128);
  EXPECT_FALSE(back.attention_bias);
  EXPECT_NE(qwen2_config_to_json(c).find("Qwen3ForCausalLM"), std::string::npos);
  // HF's default head_dim when the key is absent is 128, not hidden / heads.
  std::string no_head_dim = kQwen3_32B;
  no_head_dim.replace(no_head_dim.find("\"head_dim\": 128, "), 17, "");
  EXPECT_EQ(parse_qwen2_config(no_head_dim, "cfg.json").head_dim, 128);
  // Qwen2 keeps its rule: a head_dim other than hidden / heads is refused.
  std::string qwen2 = kQwen25_7B;
  qwen2.replace(qwen2.find("\"hidden_act\""), 0, "\"head_dim\": 64, ");
  EXPECT_NE(error_of(qwen2).find("not a Qwen2 layout"), std::string::npos);
}

TEST(Qwen2Config, RefusesQwen3VariantsItCannotRun) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = kQwen3_32B;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(error_of(with("\"full_attention\", \"full_attention\"", "\"full_attention\", \"sliding_attention\""))
                .find("layer_types"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"use_sliding_window\": false", "\"use_sliding_window\": true")).find("use_sliding_window"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"use_cache\": true", "\"use_qk_norm\": false")).find("use_qk_norm"), std::string::npos);
  EXPECT_NE(error_of(with("\"use_cache\": true", "\"headwise_attn_output_gate\": true")).find("headwise"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"head_dim\": 128", "\"head_dim\": 127")).find("head_dim 127 must be even"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"attention_bias\": false", "\"attention_bias\": 1")).find("attention_bias"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"use_cache\": true", "\"use_qk_norm\": \"yes\"")).find("'use_qk_norm' must be true or false"),
            std::string::npos);
  // null is HF's "not set": Qwen3's default, no biases.
  EXPECT_FALSE(parse_qwen2_config(with("\"attention_bias\": false", "\"attention_bias\": null"), "cfg.json").attention_bias);
  EXPECT_NE(error_of(with("\"model_type\": \"qwen3\"", "\"model_type\": \"qwen3_moe\"")).find("qwen3_moe"),
            std::string::npos);
}

TEST(ParamSpec, Qwen3HasHeadNormsAndNoBiases) {
  Qwen2Config c = parse_qwen2_config(kQwen3_32B, "cfg.json");
  c.num_hidden_layers = 1;
  auto names_of = [](const Qwen2Config& cfg) {
    std::map<std::string, ParamSpec> m;
    for (const ParamSpec& s : qwen2_param_specs(cfg)) m[s.name] = s;
    return m;
  };
  auto m = names_of(c);
  EXPECT_EQ(m.size(), 1u + 11 + 2);
  EXPECT_EQ(m.count("model.layers.0.self_attn.q_proj.bias"), 0u);
  EXPECT_EQ(m.count("model.layers.0.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(m.at("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{8192, 5120}));
  EXPECT_EQ(m.at("model.layers.0.self_attn.o_proj.weight").shape, (std::vector<int64_t>{5120, 8192}));
  EXPECT_EQ(m.at("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{1024, 5120}));
  EXPECT_EQ(m.at("model.layers.0.self_attn.q_norm.weight").shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(m.at("model.layers.0.self_attn.k_norm.weight").partition, Partition::replicated_tp_grad);
  // tp 8: heads split, head_dim whole; the norms whole on every rank.
  EXPECT_EQ(local_slice(m.at("model.layers.0.self_attn.q_proj.weight"), c, 3, 8).local_shape,
            (std::vector<int64_t>{1024, 5120}));
  EXPECT_EQ(local_slice(m.at("model.layers.0.self_attn.o_proj.weight"), c, 3, 8).local_shape,
            (std::vector<int64_t>{5120, 1024}));
  EXPECT_EQ(local_slice(m.at("model.layers.0.self_attn.q_norm.weight"), c, 3, 8).local_shape,
            (std::vector<int64_t>{128}));
  c.attention_bias = true;  // then q, k, v and o have biases; o's is whole on every rank
  m = names_of(c);
  EXPECT_EQ(m.size(), 1u + 15 + 2);
  EXPECT_EQ(m.at("model.layers.0.self_attn.o_proj.bias").partition, Partition::replicated);
  EXPECT_EQ(m.at("model.layers.0.self_attn.q_proj.bias").shape, (std::vector<int64_t>{8192}));
}

TEST(ParamSpec, HfOrderNamesAndShapes) {
  Qwen2Config c = parse_qwen2_config(kQwen25_7B, "cfg.json");
  c.num_hidden_layers = 2;
  const auto specs = qwen2_param_specs(c);
  ASSERT_EQ(specs.size(), 1u + 2 * 12 + 2);
  EXPECT_EQ(specs[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs[4].shape, (std::vector<int64_t>{512, 3584}));  // k_proj: 4 KV heads x 128
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  c.tie_word_embeddings = true;
  EXPECT_EQ(qwen2_param_specs(c).back().name, "model.norm.weight");
}

TEST(ParamSpec, SlicesCoverEveryTensorOnceAndReplicateKvHeads) {
  // Qwen2.5-3B's shape: 16 heads, 2 KV heads, so tp = 4 and 8 replicate KV heads.
  Qwen2Config c = parse_qwen2_config(kQwen25_7B, "cfg.json");
  c.hidden_size = 2048, c.num_attention_heads = 16, c.num_key_value_heads = 2, c.intermediate_size = 11008;
  c.vocab_size = 151936;
  for (int64_t tp : {1, 2, 4, 8}) {
    check_tp_compatible(c, tp);
    for (const ParamSpec& spec : qwen2_param_specs(c)) {
      if (spec.name.find("layers.1.") != std::string::npos) break;  // one layer is enough
      int64_t covered = 0;
      for (int64_t r = 0; r < tp; ++r) {
        const SliceSpec s = local_slice(spec, c, r, tp);
        if (s.dim < 0) {
          EXPECT_EQ(s.local_shape, spec.shape);
          continue;
        }
        covered += s.count;
        if (spec.partition == Partition::column_kv && tp > 2) {
          EXPECT_EQ(s.count, c.head_dim);
          EXPECT_EQ(s.begin, (r / (tp / 2)) * c.head_dim) << spec.name << " rank " << r;
        } else {
          EXPECT_EQ(s.begin, r * s.count) << spec.name;
        }
      }
      if (is_replicated(spec.partition)) continue;
      const int64_t full = spec.shape[spec.partition == Partition::row ? 1 : 0];
      EXPECT_EQ(covered, full * (spec.partition == Partition::column_kv ? kv_replicas(c, tp) : 1)) << spec.name;
    }
  }
  EXPECT_EQ(kv_replicas(c, 8), 4);
  EXPECT_THROW(check_tp_compatible(c, 3), UserError);
  // Qwen2.5-7B: 28 heads cannot be split 8 ways (tp = 4 works, with 1 KV head per rank).
  const Qwen2Config q7 = parse_qwen2_config(kQwen25_7B, "cfg.json");
  EXPECT_THROW(check_tp_compatible(q7, 8), UserError);
  check_tp_compatible(q7, 4);
}

}  // namespace
}  // namespace dapo::model
