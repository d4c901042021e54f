// `dapo import-hf`: an HF directory (config.json + safetensors) -> a step-0
// checkpoint, every rank converting and writing its share of the rows.
#include <filesystem>
#include <set>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/checkpoint.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/safetensors.h"

namespace dapo::io {

namespace fs = std::filesystem;

ImportSummary import_hf(const std::string& hf_dir, const std::string& output, const parallel::Comm& comm) {
  if (!fs::is_directory(hf_dir)) throw UserError(cat(hf_dir, ": not a directory"));
  ImportSummary summary;
  summary.config = model::load_qwen2_config((fs::path(hf_dir) / "config.json").string());
  const SafetensorsSet weights = SafetensorsSet::open_dir(hf_dir);
  const std::vector<model::ParamSpec> specs = model::qwen2_param_specs(summary.config);

  // Everything is checked before the output exists, identically on every
  // rank (same files), so a bad input fails every rank at the same point.
  std::set<std::string> wanted;
  for (const auto& spec : specs) {
    wanted.insert(spec.name);
    if (!weights.contains(spec.name))
      throw UserError(cat(weights.origin(), ": missing tensor '", spec.name, "' (", hf_dir, "/config.json needs it)"));
    const TensorInfo& t = weights.info(spec.name);
    const std::string& file = weights.file_of(spec.name).path();
    if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
      throw UserError(cat(file, ": tensor '", spec.name, "' has dtype ", t.dtype, " (import-hf reads F32, BF16, F16)"));
    if (t.shape != spec.shape) {
      TensorInfo need{t.dtype, spec.shape};
      throw UserError(cat(file, ": tensor '", spec.name, "' has shape ", t.shape_string(), " but ", hf_dir,
                          "/config.json needs ", need.shape_string()));
    }
    summary.parameters += t.numel();
  }
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
  const int64_t p = comm.size(), r = comm.rank();
  for (const auto& spec : specs) {
    // This rank's rows of dim 0 (elements of a 1-D tensor); possibly none.
    const int64_t n = spec.shape[0], row = spec.shape.size() == 2 ? spec.shape[1] : 1;
    const int64_t begin = n * r / p, end = n * (r + 1) / p;
    if (end == begin) {
      writer.write_model(spec.name, Hyperslab::none(), nullptr);
      continue;
    }
    rows.resize(size_t((end - begin) * row));
    weights.read_f32_slice(spec.name, 0, begin, end - begin, rows.data());
    Hyperslab slab = Hyperslab::whole(spec.shape);
    slab.start[0] = begin;
    slab.count[0] = end - begin;
    writer.write_model(spec.name, slab, rows.data());
  }
  writer.commit();
  summary.tensors = int64_t(specs.size());
  DAPO_INFO("import-hf: ", specs.size(), " tensors, ", summary.parameters, " parameters from ", weights.origin(),
            " -> ", output);
  return summary;
}

}  // namespace dapo::io
