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
#include "dapo/trainer/run_guard.h"
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

// checkpoint.dir/sft_final.h5's step count when it is there, else -1.
// Collective; a file that does not load is a UserError on every rank.
int64_t finished_sft_step(const Config& config, const parallel::Grid& grid) {
  const std::string path = (fs::path(config.checkpoint.dir) / kSftCheckpointName).string();
  const int64_t there = grid.world.all_reduce_i64(grid.world_rank() == 0 && fs::exists(path) ? 1 : 0,
                                                  parallel::ReduceOp::max);
  if (!there) return -1;
  try {
    return io::CheckpointReader(path, grid.world).info().step;
  } catch (const UserError& e) {  // raised on every rank alike
    throw UserError(cat(config.origin_of("checkpoint.dir"), ": checkpoint.dir: ", config.checkpoint.dir,
                        " holds another dapo sft run's model, which does not load (", e.what(),
                        "); move it away to start afresh, or choose another checkpoint.dir"));
  }
}

std::string finished_model_refusal(const Config& config, const std::string& why) {
  return cat(config.origin_of("checkpoint.dir"), ": checkpoint.dir: ", config.checkpoint.dir,
             " holds a finished dapo sft model (", (fs::path(config.checkpoint.dir) / kSftCheckpointName).string(),
             why, ") and checkpoint.resume = ", config.checkpoint.resume,
             "; dapo sft does not replace it: move it away or choose another checkpoint.dir to start afresh, or "
             "train on from it with model.path = that file and another checkpoint.dir");
}

}  // namespace

SftSummary run_sft_job(const Config& config, const std::string& data_path, const parallel::Grid& grid) {
  const auto start = Clock::now();
  const bool root = grid.world_rank() == 0;
  const std::string& resume = config.checkpoint.resume;
  if (resume != "auto" && resume != "never")
    throw UserError(cat(config.origin_of("checkpoint.resume"), ": checkpoint.resume = ", resume,
                        ": dapo sft does not resume from a checkpoint (its model keeps no optimizer state or data "
                        "position); set checkpoint.resume = auto or never, and model.path = ", resume,
                        " to start from that model"));
  // Before anything is written: the output folders can be written and no
  // other run uses them (the lock is held until the job returns).
  const RunLock lock = prepare_output_folders(config, grid, false);
  if (resume == "never" && finished_sft_step(config, grid) >= 0)
    throw UserError(finished_model_refusal(config, ""));
  const std::unique_ptr<ops::CudaDevice> gpu = open_rank_device(config, grid, grid.local_rank);
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
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  const int64_t steps = trainer->planned_steps();

  // A finished run's model in checkpoint.dir (resume = auto): as dapo train
  // at the end of its planned steps, nothing to do when it has run as many
  // steps as this one plans, touching nothing; fewer: refused, since an SFT
  // model cannot be continued and starting over would replace it.
  if (const int64_t done = finished_sft_step(config, grid); done >= 0) {
    if (done < steps) throw UserError(finished_model_refusal(config, cat(", ", done, " steps; this run plans ", steps)));
    summary.nothing_to_do = true;
    summary.steps = done;
    summary.checkpoint = (fs::path(config.checkpoint.dir) / kSftCheckpointName).string();
    DAPO_INFO("sft: nothing to do: ", summary.checkpoint, " is a finished run of ", done,
              " steps, and this one plans ", steps, " (checkpoint.resume = auto); nothing was written");
    summary.seconds = seconds_since(start);
    return summary;
  }
  check_checkpoint_space(config, grid, mc, false);
  check_log_dir_owner(config, grid, false);  // sft never continues a run
  write_run_config(config, grid);
  try {
    metrics.emplace((fs::path(config.log.dir) / "metrics.jsonl").string(), root);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);

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
