// Loading or freshly initialising the model a training run starts from.
#include "dapo/trainer/model_init.h"

#include <cmath>
#include <filesystem>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/checkpoint.h"
#include "dapo/model/qwen2_config.h"

namespace dapo::trainer {
namespace fs = std::filesystem;

bool has_hf_weights(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 12 && name.ends_with(".safetensors")) return true;
    if (name.ends_with(".safetensors.index.json")) return true;
  }
  return false;
}

model::ModelOptions model_options(const Config& config) {
  model::ModelOptions o;
  o.activation_recompute = config.train.activation_recompute;
  o.fp32_head = config.train.fp32_logits;
  o.batch_invariant = config.rollout.exact_logprobs;
  return o;
}

model::RandomInit fresh_init(uint64_t seed) {
  model::RandomInit init;
  init.seed = seed;
  init.weight_scale = float(kInitStd * std::sqrt(3.0));  // uniform(-a, a) has std a / sqrt(3)
  init.bias_scale = 0.0f;
  init.norm_scale = 0.0f;
  return init;
}

model::Qwen2Config initial_model_config(const Config& config, const parallel::Grid& grid) {
  std::string error;
  rollout::ModelSource source;
  model::Qwen2Config mc;
  try {
    source = rollout::resolve_model_source("", config.model);
    if (source.hf_dir) mc = model::load_qwen2_config((fs::path(source.path) / "config.json").string());
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  if (!source.hf_dir) mc = io::CheckpointReader(source.path, grid.world).info().model;
  return mc;
}

InitialModel load_initial_model(const Config& config, const parallel::Grid& grid, const ops::CudaDevice* gpu) {
  const Device device = gpu ? Device::cuda : Device::cpu;
  void* stream = gpu ? gpu->ctx(nullptr).stream : nullptr;
  InitialModel out;
  std::string error;
  try {
    out.source = rollout::resolve_model_source("", config.model);
    out.random_init = out.source.hf_dir && !has_hf_weights(out.source.path);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  if (!out.random_init) {
    out.params = rollout::load_model_params(out.source, grid, device, stream);
    return out;
  }
  model::Qwen2Config mc;
  try {
    mc = model::load_qwen2_config((fs::path(out.source.path) / "config.json").string());
    model::check_tp_compatible(mc, grid.tp_size);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  out.params = std::make_unique<model::ParamStore>(mc, grid.tp_rank, grid.tp_size, device, stream);
  out.params->init_random(fresh_init(uint64_t(config.train.seed)));
  DAPO_INFO("model: ", out.source.path, " has no weights: random init (std ", kInitStd, ", train.seed = ",
            config.train.seed, ")");
  return out;
}

}  // namespace dapo::trainer
