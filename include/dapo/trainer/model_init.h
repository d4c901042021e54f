// The model a training run starts from (`dapo sft`, `dapo train`), named by
// model.path:
//   - a dapo checkpoint (.h5) or an HF directory with weights
//     (config.json + *.safetensors): loaded through rollout/model_source.h,
//     each rank reading only its tensor-parallel slices;
//   - an HF directory holding config.json but NO safetensors: a fresh model
//     initialised at random with seed train.seed (how the demo's tiny model
//     is trained from scratch). The values follow HF transformers' Qwen2
//     init in scale - matrices with standard deviation 0.02 (uniform in
//     +-0.02*sqrt(3), drawn by ParamStore::init_random, so the same on any
//     tp), biases 0, norm weights 1 - and are a pure function of
//     (train.seed, tensor name, element), whatever tp and dp are.
// The tokenizer comes with the source (model.tokenizer, or tokenizer.json
// beside the model).
#pragma once

#include <memory>

#include "dapo/core/config.h"
#include "dapo/model/param_store.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/parallel/grid.h"
#include "dapo/rollout/model_source.h"

namespace dapo::trainer {

// HF's initializer_range default for Qwen2, the standard deviation of the
// random matrices.
inline constexpr double kInitStd = 0.02;

struct InitialModel {
  std::unique_ptr<model::ParamStore> params;  // this rank's slices
  rollout::ModelSource source;
  bool random_init = false;  // a config.json-only directory
};

// Whether `dir` holds HF weights (model.safetensors, its index, or any
// *.safetensors file).
bool has_hf_weights(const std::string& dir);

// The random init of a config.json-only directory with `seed`.
model::RandomInit fresh_init(uint64_t seed);

// The model's options from the run's config (train.activation_recompute,
// train.fp32_logits, rollout.exact_logprobs): the trainer, the SFT step
// (which then ignores rollout.exact_logprobs: it samples nothing) and the
// memory plan use the same.
model::ModelOptions model_options(const Config& config);

// Collective over grid.world. UserError (on every rank alike) for a missing
// model.path, an unreadable model or a model tp cannot split.
// The store lives on `gpu` (its memory and stream) when one is given.
// The architecture of model.path (an HF directory's config.json, or a dapo
// checkpoint's model_config), read without loading weights. Collective
// over grid.world; UserError on every rank alike.
model::Qwen2Config initial_model_config(const Config& config, const parallel::Grid& grid);

InitialModel load_initial_model(const Config& config, const parallel::Grid& grid,
                                const ops::CudaDevice* gpu = nullptr);

}  // namespace dapo::trainer
