// Qwen2's parameter list in HF order and the slice of each that a tp rank holds.
#include "dapo/model/param_spec.h"

#include "dapo/core/error.h"

namespace dapo::model {

const char* partition_name(Partition p) {
  switch (p) {
    case Partition::replicated: return "replicated";
    case Partition::replicated_tp_grad: return "replicated_tp_grad";
    case Partition::column: return "column";
    case Partition::column_kv: return "column_kv";
    case Partition::row: return "row";
    case Partition::vocab: return "vocab";
  }
  return "?";
}

std::vector<ParamSpec> qwen2_param_specs(const Qwen2Config& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  std::vector<ParamSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {V, C}, Partition::vocab});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    specs.push_back({p + "input_layernorm.weight", {C}, Partition::replicated});
    specs.push_back({p + "self_attn.q_proj.weight", {q, C}, Partition::column});
    if (c.attention_bias) specs.push_back({p + "self_attn.q_proj.bias", {q}, Partition::column});
    specs.push_back({p + "self_attn.k_proj.weight", {kv, C}, Partition::column_kv});
    if (c.attention_bias) specs.push_back({p + "self_attn.k_proj.bias", {kv}, Partition::column_kv});
    specs.push_back({p + "self_attn.v_proj.weight", {kv, C}, Partition::column_kv});
    if (c.attention_bias) specs.push_back({p + "self_attn.v_proj.bias", {kv}, Partition::column_kv});
    specs.push_back({p + "self_attn.o_proj.weight", {C, q}, Partition::row});
    // Qwen3's attention_bias covers o_proj too (Qwen2's o_proj never has
    // one). Row-parallel: the bias is added once, after the reduction, and
    // its gradient is whole on every rank.
    if (c.o_proj_bias()) specs.push_back({p + "self_attn.o_proj.bias", {C}, Partition::replicated});
    if (c.qk_norm()) {
      specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, Partition::replicated_tp_grad});
      specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, Partition::replicated_tp_grad});
    }
    specs.push_back({p + "post_attention_layernorm.weight", {C}, Partition::replicated});
    specs.push_back({p + "mlp.gate_proj.weight", {I, C}, Partition::column});
    specs.push_back({p + "mlp.up_proj.weight", {I, C}, Partition::column});
    specs.push_back({p + "mlp.down_proj.weight", {C, I}, Partition::row});
  }
  specs.push_back({"model.norm.weight", {C}, Partition::replicated});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {V, C}, Partition::vocab});
  return specs;
}

int64_t kv_replicas(const Qwen2Config& c, int64_t tp) {
  return tp > c.num_key_value_heads ? tp / c.num_key_value_heads : 1;
}

SliceSpec local_slice(const ParamSpec& spec, const Qwen2Config& c, int64_t tp_rank, int64_t tp) {
  DAPO_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "tp rank ", tp_rank, " of ", tp);
  SliceSpec s;
  s.local_shape = spec.shape;
  auto split = [&](int dim, int64_t begin, int64_t count) {
    DAPO_CHECK(dim < int(spec.shape.size()) && begin + count <= spec.shape[size_t(dim)], spec.name, " slice");
    s.dim = dim;
    s.begin = begin;
    s.count = count;
    s.local_shape[size_t(dim)] = count;
  };
  switch (spec.partition) {
    case Partition::replicated:
    case Partition::replicated_tp_grad:
      s.count = spec.shape.empty() ? 1 : spec.shape[0];
      break;
    case Partition::column:
    case Partition::vocab: {
      DAPO_CHECK(spec.shape[0] % tp == 0, spec.name, " dim 0 = ", spec.shape[0], " not divisible by tp ", tp);
      const int64_t n = spec.shape[0] / tp;
      split(0, tp_rank * n, n);
      break;
    }
    case Partition::row: {
      DAPO_CHECK(spec.shape.size() == 2 && spec.shape[1] % tp == 0, spec.name, " dim 1 not divisible by tp ", tp);
      const int64_t n = spec.shape[1] / tp;
      split(1, tp_rank * n, n);
      break;
    }
    case Partition::column_kv: {
      const int64_t hkv = c.num_key_value_heads, d = c.head_dim;
      DAPO_CHECK(spec.shape[0] == hkv * d, spec.name, " is not (Hkv*D, ...)");
      if (tp <= hkv) {
        const int64_t heads = hkv / tp;
        split(0, tp_rank * heads * d, heads * d);
      } else {
        const int64_t head = tp_rank / (tp / hkv);  // ranks sharing a KV head are neighbours
        split(0, head * d, d);
      }
      break;
    }
  }
  return s;
}

}  // namespace dapo::model
