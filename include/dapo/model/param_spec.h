// The parameters of a Qwen2 model by HF tensor name, in HF order, with the
// tensor-parallel partition rule of each (Megatron layout). One rule serves
// the model (which slice a rank holds), `import-hf` (each rank reads only
// its slice) and checkpoints (hyperslab per rank): resharding is the same
// code as loading.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dapo/model/qwen2_config.h"

namespace dapo::model {

enum class Partition : uint8_t {
  replicated,  // every tp rank holds all of it (norm weights)
  // Every tp rank holds all of it, but each rank's gradient covers only its
  // own heads: the model sums it over tp (Qwen3's q_norm, k_norm, shared by
  // all heads; HF's "replicated_with_grad_allreduce").
  replicated_tp_grad,
  column,      // dim 0 (output features) split: q_proj, gate_proj, up_proj (+ q bias)
  column_kv,   // dim 0 split by KV head; replicated across ranks when tp > Hkv: k_proj, v_proj (+ biases)
  row,         // dim 1 (input features) split: o_proj, down_proj
  vocab,       // dim 0 (vocabulary) split: embed_tokens, lm_head
};
const char* partition_name(Partition p);
// Whether every tp rank holds the whole tensor (replicated, replicated_tp_grad).
inline bool is_replicated(Partition p) { return p == Partition::replicated || p == Partition::replicated_tp_grad; }

struct ParamSpec {
  std::string name;            // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // full logical shape, HF layout ((out, in) for linears)
  Partition partition = Partition::replicated;
};

// All parameters of the model in HF order (embed_tokens, per layer:
// input_layernorm, q/k/v (weight, and bias where attention_bias), o (and
// Qwen3's bias where attention_bias), q_norm
// and k_norm (qwen3), post_attention_layernorm, gate/up/down; then
// model.norm, and lm_head unless tied).
std::vector<ParamSpec> qwen2_param_specs(const Qwen2Config& config);

// The part of a full tensor that tp rank `tp_rank` of `tp` holds: rows or
// columns [begin, begin + count) along `dim` (dim = -1: the whole tensor).
struct SliceSpec {
  int dim = -1;
  int64_t begin = 0;
  int64_t count = 0;
  std::vector<int64_t> local_shape;
};
SliceSpec local_slice(const ParamSpec& spec, const Qwen2Config& config, int64_t tp_rank, int64_t tp);

// Ranks that hold the same slice of a column_kv tensor form a "KV replica
// group" of size max(1, tp / Hkv): their gradients must be summed.
int64_t kv_replicas(const Qwen2Config& config, int64_t tp);

}  // namespace dapo::model
