// `dapo import-hf`: an HF directory (config.json + safetensors) -> a step-0
// checkpoint, every rank converting and writing its share of the rows.
#include <algorithm>
#include <filesystem>
#include <set>
#include <string_view>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"
#include "dapo/io/tensor_digest.h"

namespace dapo::io {

namespace fs = std::filesystem;

namespace {

// The layer of "model.layers.<l>.<rest>", or -1 for any other name.
int64_t layer_of(const std::string& name) {
  static constexpr std::string_view kPrefix = "model.layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  int64_t l = 0;
  size_t i = kPrefix.size();
  for (; i < name.size() && i < kPrefix.size() + 12 && name[i] >= '0' && name[i] <= '9'; ++i) l = l * 10 + (name[i] - '0');
  return i > kPrefix.size() && i < name.size() && name[i] == '.' ? l : -1;
}

// Tensors that Qwen2 saves carry besides the parameters, and that dapo may
// leave out without losing anything: rotary inv_freq buffers (recomputed
// from rope_theta; older transformers saved one per layer) and, in a tied
// model, lm_head.weight (transformers ties it to the embedding on load).
bool known_extra(const std::string& name, const model::Qwen2Config& config) {
  static constexpr std::string_view kInvFreq = ".self_attn.rotary_emb.inv_freq";
  if (name == "lm_head.weight") return config.tie_word_embeddings;
  if (name == "model.rotary_emb.inv_freq") return true;
  const int64_t l = layer_of(name);
  return l >= 0 && l < config.num_hidden_layers && name.size() > kInvFreq.size() &&
         name.compare(name.size() - kInvFreq.size(), kInvFreq.size(), kInvFreq) == 0;
}

// "'a', 'b', 'c' and 4 more"
std::string first_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 3; ++i) s += cat(i ? ", '" : "'", names[i], "'");
  if (names.size() > 3) s += cat(" and ", names.size() - 3, " more");
  return s;
}

}  // namespace

int64_t check_hf_weights(const SafetensorsSet& weights, const model::Qwen2Config& config, const std::string& hf_dir,
                         std::vector<std::string>* ignored) {
  const std::string config_file = cat(hf_dir, "/config.json");
  check_layer_count(config, weights.names(), config_file);
  // Layers beyond num_hidden_layers: a config that says too few would leave
  // the last layers' weights out of the model without a word.
  std::vector<std::string> beyond;
  int64_t top = -1;
  for (const std::string& name : weights.names())
    if (const int64_t l = layer_of(name); l >= config.num_hidden_layers) {
      beyond.push_back(name);
      top = std::max(top, l);
    }
  if (!beyond.empty()) {
    std::sort(beyond.begin(), beyond.end());
    throw UserError(cat(config_file, ": num_hidden_layers = ", config.num_hidden_layers, " but ", weights.origin(),
                        " holds layers up to ", top, " (", beyond.size(), " tensors of layers >= ",
                        config.num_hidden_layers, ": ", first_names(beyond),
                        "): a damaged or mismatched model configuration, refused rather than leaving those layers "
                        "out: set num_hidden_layers to the model's layer count (", top + 1,
                        " if every layer is there)"));
  }
  int64_t parameters = 0;
  std::set<std::string> wanted;
  for (const auto& spec : model::qwen2_param_specs(config)) {
    wanted.insert(spec.name);
    if (!weights.contains(spec.name))
      throw UserError(cat(weights.origin(), ": missing tensor '", spec.name, "' (", config_file, " needs it)"));
    const TensorInfo& t = weights.info(spec.name);
    const std::string& file = weights.file_of(spec.name).path();
    if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
      throw UserError(cat(file, ": tensor '", spec.name, "' has dtype ", t.dtype, " (dapo reads F32, BF16, F16)"));
    if (t.shape != spec.shape) {
      TensorInfo need{t.dtype, spec.shape};
      throw UserError(cat(file, ": tensor '", spec.name, "' has shape ", t.shape_string(), " but ", config_file,
                          " needs ", need.shape_string()));
    }
    parameters += t.numel();
  }
  // Any other tensor is weight dapo's Qwen2 has no place for (another
  // architecture's, an adapter's, quantization scales): refused, not dropped.
  std::vector<std::string> unknown;
  for (const std::string& name : weights.names()) {
    if (wanted.count(name)) continue;
    if (!known_extra(name, config)) {
      unknown.push_back(name);
    } else if (ignored) {
      ignored->push_back(name);
    }
  }
  if (!unknown.empty()) {
    std::sort(unknown.begin(), unknown.end());
    throw UserError(cat(weights.origin(), ": ", unknown.size(), unknown.size() == 1 ? " tensor is" : " tensors are",
                        " not part of the model of ", config_file, " (", first_names(unknown),
                        "): dapo would leave them out; a model of another architecture, or weights dapo does not "
                        "know (adapters, quantization scales), are refused rather than dropped"));
  }
  return parameters;
}

ImportSummary import_hf(const std::string& hf_dir, const std::string& output, const parallel::Comm& comm) {
  if (!fs::is_directory(hf_dir)) throw UserError(cat(hf_dir, ": not a directory"));
  ImportSummary summary;
  summary.config = model::load_qwen2_config((fs::path(hf_dir) / "config.json").string());
  const SafetensorsSet weights = SafetensorsSet::open_dir(hf_dir);

  // Everything is checked before the output exists, identically on every
  // rank (same files), so a bad input fails every rank at the same point.
  summary.parameters = check_hf_weights(weights, summary.config, hf_dir, &summary.ignored);
  const std::vector<model::ParamSpec> specs = model::qwen2_param_specs(summary.config);
  for (const auto& name : summary.ignored)
    DAPO_DEBUG("import-hf: ignoring ", name, " (rotary inv_freq buffer, or the lm_head of a tied model)");
  const fs::path parent = fs::path(output).parent_path();
  if (!parent.empty() && !fs::is_directory(parent))
    throw UserError(cat(output, ": directory ", parent.string(), " does not exist"));

  CheckpointInfo info;
  info.model = summary.config;
  info.world_size = comm.size();
  info.tp = 1;
  info.dp = comm.size();
  CheckpointWriter writer(output, comm, info);
  std::vector<float> rows;
  std::vector<int64_t> non_finite(specs.size(), 0);  // per tensor, summed over ranks below
  const int64_t p = comm.size(), r = comm.rank();
  for (size_t t = 0; t < specs.size(); ++t) {
    const model::ParamSpec& spec = specs[t];
    // This rank's rows of dim 0 (elements of a 1-D tensor); possibly none.
    const int64_t n = spec.shape[0], row = spec.shape.size() == 2 ? spec.shape[1] : 1;
    const int64_t begin = n * r / p, end = n * (r + 1) / p;
    if (end == begin) {
      writer.write_model(spec.name, Hyperslab::none(), nullptr);
      continue;
    }
    rows.resize(size_t((end - begin) * row));
    weights.read_f32_slice(spec.name, 0, begin, end - begin, rows.data());
    non_finite[t] = count_non_finite(rows.data(), int64_t(rows.size()));
    Hyperslab slab = Hyperslab::whole(spec.shape);
    slab.start[0] = begin;
    slab.count[0] = end - begin;
    writer.write_model(spec.name, slab, rows.data());
  }
  writer.commit();
  // A conversion converts what it is given, but says so at once: generate,
  // train and eval refuse a model with NaN or Inf when they load it.
  comm.all_reduce_i64(non_finite, parallel::ReduceOp::sum);
  for (size_t t = 0; t < specs.size(); ++t) {
    if (non_finite[t] == 0) continue;
    summary.non_finite.push_back(specs[t].name);
    if (comm.rank() == 0)
      DAPO_WARN("import-hf: non-finite values in tensor ", specs[t].name, " of ", weights.file_of(specs[t].name).path(),
                " (", non_finite[t], " NaN or Inf); ", output, " is written, but generate, train and eval refuse to "
                "load it");
  }
  summary.tensors = int64_t(specs.size());
  DAPO_INFO("import-hf: ", specs.size(), " tensors, ", summary.parameters, " parameters from ", weights.origin(),
            " -> ", output);
  return summary;
}

}  // namespace dapo::io
