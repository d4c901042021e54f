// run_sft_job: data + model -> SftTrainer steps -> metrics, console,
// final checkpoint.
#include "dapo/trainer/sft_job.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "dapo/core/clock.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/data/dataset.h"
#include "dapo/io/checkpoint.h"
#include "dapo/trainer/metrics_writer.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/rank_device.h"
#include "dapo/trainer/run_files.h"
#include "dapo/trainer/sft_step.h"
#include "dapo/trainer/watchdog.h"

namespace dapo::trainer {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> data_files(const Config& config, const std::string& data_path) {
  if (!data_path.empty()) return {data_path};
  if (config.data.train_files.empty())
    throw UserError("no SFT data: give --data SFT.jsonl, or data.train_files");
  return data::split_file_list(config.data.train_files, "data.train_files");
}

}  // namespace

SftSummary run_sft_job(const Config& config, const std::string& data_path, const parallel::Grid& grid) {
  const auto start = Clock::now();
  const bool root = grid.world_rank() == 0;
  const std::unique_ptr<ops::CudaDevice> gpu = open_rank_device(config, grid, grid.local_rank);
  write_run_config(config, grid);
  std::string error;

  InitialModel initial = load_initial_model(config, grid, gpu.get());
  model::ParamStore& params = *initial.params;
  const model::Qwen2Config& mc = params.config();
  std::optional<data::Tokenizer> tokenizer;
  std::vector<SftExample> examples;
  data::TruncationStats truncation;
  try {
    if (!initial.source.tokenizer.empty()) tokenizer.emplace(data::Tokenizer::load(initial.source.tokenizer));
    SftEncoding enc;
    enc.tokenizer = tokenizer ? &*tokenizer : nullptr;
    enc.chat = data::resolve_chat_format(config.model.chat_template, initial.source.tokenizer);
    enc.eos_id = sft_eos_id(enc.tokenizer, mc.eos_token_ids);
    enc.vocab_size = mc.vocab_size;
    enc.max_positions = mc.max_position_embeddings;
    enc.max_prompt_length = config.data.max_prompt_length;
    enc.truncation = config.data.truncation;
    for (const std::string& file : data_files(config, data_path)) {
      std::vector<SftExample> part = load_sft_file(file, enc, truncation);
      examples.insert(examples.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  if (root) truncation.report(config.data.max_prompt_length, "sft data");
  DAPO_INFO("sft: ", examples.size(), " prompt/response pairs, tokenizer ",
            tokenizer ? initial.source.tokenizer : std::string("none (token ids only)"), ", world ",
            grid.world_size(), " = tp ", grid.tp_size, " x dp ", grid.dp_size);

  SftSummary summary;
  summary.examples = int64_t(examples.size());
  std::optional<SftTrainer> trainer;
  std::optional<MetricsWriter> metrics;
  try {
    trainer.emplace(params, grid, config, std::move(examples), gpu.get());
    metrics.emplace((fs::path(config.log.dir) / "metrics.jsonl").string(), root);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);

  const int64_t steps = trainer->planned_steps();
  // A dead or stuck rank (a hung NCCL collective included) ends the job
  // with one line and exit 5 instead of hanging it, as in dapo train.
  Watchdog watchdog(config.train.phase_timeout_s, grid.world_rank());
  watchdog.watch(&grid.world, "world");
  watchdog.watch(&grid.tp, "tp");
  watchdog.watch(&grid.dp, "dp");
  for (int64_t s = 0; s < steps; ++s) {
    watchdog.enter("update", s + 1);
    SftStepResult r;
    error.clear();
    try {
      r = trainer->step();
    } catch (const UserError& e) {  // a sequence over the micro-batch budget (the same on every rank)
      error = e.what();
    }
    io::agree_on_error(grid.world, error);
    if (s == 0) summary.first_loss = r.loss;
    summary.last_loss = r.loss;
    const Metrics m = r.metrics(grid.world_size());
    metrics->write(r.step, m);
    DAPO_INFO("sft step ", r.step, "/", steps, "  loss ", r.loss, "  grad_norm ", r.report.grad_norm, "  lr ",
              r.report.lr, r.report.skipped ? "  (skipped: non-finite grad norm)" : "", "  ", r.response_tokens,
              " response tokens  ", int64_t(m.get("perf/throughput")), " tokens/s/rank  ", r.seconds, " s");
  }
  summary.steps = steps;

  // The final model, then `latest` naming it.
  watchdog.enter("checkpoint", steps);
  summary.checkpoint = save_model_snapshot(config, grid, params, steps, kSftCheckpointName);
  summary.seconds = seconds_since(start);
  return summary;
}

}  // namespace dapo::trainer
