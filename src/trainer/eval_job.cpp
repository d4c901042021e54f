// run_eval_job: model + tokenizer + problems -> run_validation -> metrics.
#include "dapo/trainer/eval_job.h"

#include <optional>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/checkpoint.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/rollout/model_source.h"
#include "dapo/trainer/rank_device.h"
#include "dapo/trainer/run_files.h"

namespace dapo::trainer {

ValidationResult run_eval_job(const Config& config, const EvalJob& job, const parallel::Grid& grid) {
  const std::string files = !job.data.empty() ? job.data : config.data.val_files;
  if (files.empty()) throw UserError("no evaluation data: give --data D.jsonl, or data.val_files");
  const rollout::ModelSource source = rollout::resolve_model_source(job.checkpoint, config.model);
  const std::unique_ptr<ops::CudaDevice> gpu = open_rank_device(config, grid, grid.local_rank);
  Arena no_scratch(0, device_of(gpu.get()), "unused");  // the engine brings its own
  const ops::Ctx ctx = gpu ? gpu->ctx(&no_scratch) : ops::Ctx{};
  std::unique_ptr<model::ParamStore> params =
      rollout::load_model_params(source, grid, device_of(gpu.get()), ctx.stream);
  int64_t step = 0;
  if (!source.hf_dir) step = io::CheckpointReader(source.path, grid.world).info().step;

  std::string error;
  std::optional<data::Tokenizer> tokenizer;
  data::PromptDataset dataset;
  std::optional<PromptSet> problems;
  try {
    if (source.tokenizer.empty())
      throw UserError(cat("dapo eval needs a tokenizer (the verifier reads response text): set model.tokenizer or "
                          "put tokenizer.json beside ", source.path));
    tokenizer.emplace(data::Tokenizer::load(source.tokenizer));
    dataset = data::PromptDataset::load_list(files, job.data.empty() ? "data.val_files" : "--data");
    problems.emplace(dataset, *tokenizer, prompt_set_options(config, params->config().vocab_size));
    check_prompt_positions(*problems, config, params->config());
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  if (grid.world_rank() == 0) {
    data::TruncationStats t = problems->truncation();
    t.report(config.data.max_prompt_length, "evaluation problems");
  }

  const model::Qwen2Model model(*params, grid.tp);
  rollout::GenerationEngine engine(model, grid.tp, ctx, rollout::engine_options(config));
  const rollout::SamplingOptions sampling =
      rollout::validation_sampling_options(config, rollout::response_eos_ids(&*tokenizer, params->config()), 0);
  if (grid.world_rank() == 0 && sampling.temperature == 0 && sampling.n > 1)
    DAPO_WARN("eval: rollout.val_n = ", sampling.n, " at rollout.val_temperature = 0 (greedy): the ", sampling.n,
              " answers to each problem are identical, so pass@", sampling.n, " equals mean@", sampling.n);
  ValidationResult result;
  try {
    result = run_validation(engine, *problems, sampling, reward_settings(config, *tokenizer), grid);
  } catch (const UserError& e) {
    error = e.what();  // a KV budget too small for one sequence
  }
  io::agree_on_error(grid.world, error);
  if (gpu) gpu->check_flags("evaluation");

  if (!job.output.empty()) {
    if (grid.world_rank() == 0) {
      try {
        Metrics m;
        result.add_to(m);
        write_file_atomically(job.output, metrics_json_line(step, m) + "\n", "evaluation metrics");
      } catch (const UserError& e) {
        error = e.what();
      }
    }
    io::agree_on_error(grid.world, error);
  }
  return result;
}

}  // namespace dapo::trainer
