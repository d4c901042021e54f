// config.json parsing (transformers 4.x and 5.x), refusals, and the tp split rules.
#include "dapo/model/qwen2_config.h"

#include <gtest/gtest.h>

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
      if (spec.partition == Partition::replicated) continue;
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
