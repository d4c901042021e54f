// `dapo import-hf`: an HF directory (config.json + safetensors) -> a step-0
// checkpoint, every rank converting and writing its share of the rows.
#include <filesystem>
#include <set>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"
#include "dapo/io/tensor_digest.h"

namespace dapo::io {

namespace fs = std::filesystem;

int64_t check_hf_weights(const SafetensorsSet& weights, const model::Qwen2Config& config, const std::string& hf_dir) {
  check_layer_count(config, weights.names(), cat(hf_dir, "/config.json"));
  int64_t parameters = 0;
  for (const auto& spec : model::qwen2_param_specs(config)) {
    if (!weights.contains(spec.name))
      throw UserError(cat(weights.origin(), ": missing tensor '", spec.name, "' (", hf_dir, "/config.json needs it)"));
    const TensorInfo& t = weights.info(spec.name);
    const std::string& file = weights.file_of(spec.name).path();
    if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
      throw UserError(cat(file, ": tensor '", spec.name, "' has dtype ", t.dtype, " (dapo reads F32, BF16, F16)"));
    if (t.shape != spec.shape) {
      TensorInfo need{t.dtype, spec.shape};
      throw UserError(cat(file, ": tensor '", spec.name, "' has shape ", t.shape_string(), " but ", hf_dir,
                          "/config.json needs ", need.shape_string()));
    }
    parameters += t.numel();
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
  summary.parameters = check_hf_weights(weights, summary.config, hf_dir);
  const std::vector<model::ParamSpec> specs = model::qwen2_param_specs(summary.config);
  std::set<std::string> wanted;
  for (const auto& spec : specs) wanted.insert(spec.name);
  for (const auto& name : weights.names())
    if (!wanted.count(name)) {
      summary.ignored.push_back(name);
      DAPO_DEBUG("import-hf: ignoring ", name, " (not a parameter of the model)");
    }
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
