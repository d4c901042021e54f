// run_train_job: model + data -> DapoTrainer steps + validation -> metrics,
// console, final model.
#include "dapo/trainer/train_job.h"

#include <cstdio>
#include <utility>
#include <filesystem>
#include <optional>

#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/data/dataset.h"
#include "dapo/io/checkpoint.h"
#include "dapo/trainer/checkpoint_saver.h"
#include "dapo/trainer/checkpointing.h"
#include "dapo/trainer/dapo_trainer.h"
#include "dapo/trainer/memory_plan.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/prompt_set.h"
#include "dapo/trainer/rank_device.h"
#include "dapo/trainer/run_guard.h"
#include "dapo/trainer/run_length.h"
#include "dapo/trainer/run_files.h"
#include "dapo/trainer/step_dump.h"
#include "dapo/trainer/step_metrics.h"
#include "dapo/trainer/timing.h"
#include "dapo/trainer/stop_signals.h"
#include "dapo/trainer/validation.h"

namespace dapo::trainer {
namespace fs = std::filesystem;
namespace {


// A progress line at most every `period` seconds while generating.
rollout::ProgressCallback progress_lines(const char* what, double period) {
  auto last = std::make_shared<Clock::time_point>(Clock::now());
  return [what, period, last](const rollout::GenerationProgress& p) {
    if (seconds_since(*last) < period) return;
    *last = Clock::now();
    DAPO_INFO(what, ": ", p.finished, "/", p.total, " responses, ", p.running, " running, ", p.waiting, " waiting, ",
              int64_t(p.tokens_per_s), " tokens/s");
  };
}

void log_validation(const ValidationResult& v, int64_t step) {
  for (const SourceValidation& s : v.sources)
    DAPO_INFO("validation at step ", step, ": ", s.source, ": acc mean@", v.k, " ", s.acc_mean, ", pass@", v.k, " ",
              s.acc_pass, " (", to_string(v.verifier), "; ", to_string(v.other_verifier), ": ", s.other_acc_mean,
              ", ", s.other_acc_pass, "), score ", s.score_mean, ", response length ", s.length_mean, " (",
              s.problems, " problems, ", v.seconds, " s)");
}

}  // namespace

TrainSummary run_train_job(const Config& config, const parallel::Grid& grid, const StopSignals& signals) {
  const auto start = Clock::now();
  const bool root = grid.world_rank() == 0;
  check_training_config(config);
  if (config.data.train_files.empty()) throw UserError("no training prompts: set data.train_files");
  // Before anything is written: the output folders do not clash, can be
  // written, have room for a checkpoint, and no other run uses them (the
  // lock is held until the job returns).
  const bool dumps = config.dump.every > 0;
  const RunLock lock = prepare_output_folders(config, grid, dumps);
  check_checkpoint_space(config, grid, initial_model_config(config, grid), true);
  check_log_dir_owner(config, grid, has_resume_candidate(config));
  write_run_config(config, grid);

  const std::unique_ptr<ops::CudaDevice> gpu = open_rank_device(config, grid, grid.local_rank);
  if (gpu) {
    // Before anything is loaded: a run that cannot fit stops here, saying what to change.
    const MemoryPlan plan =
        memory_plan(config, initial_model_config(config, grid), grid.tp_size, grid.dp_size, gpu->memory_total());
    if (!plan.fits()) throw UserError(cat("the run does not fit the GPUs' memory\n", format_memory_plan(plan, config)));
    if (root) DAPO_INFO(format_memory_plan(plan, config));
  }
  InitialModel initial = load_initial_model(config, grid, gpu.get());
  model::ParamStore& params = *initial.params;
  std::unique_ptr<model::ParamStore> reference;
  if (config.algorithm.kl_coef > 0) reference = load_initial_model(config, grid, gpu.get()).params;

  // Tokenizer and prompt sets; every rank reads them, errors agree.
  std::string error;
  std::optional<data::Tokenizer> tokenizer;
  data::PromptDataset train_data, val_data;
  std::optional<PromptSet> train, val;
  try {
    if (initial.source.tokenizer.empty())
      throw UserError(cat("dapo train needs a tokenizer (the verifier reads response text): set model.tokenizer or "
                          "put tokenizer.json beside ", initial.source.path));
    tokenizer.emplace(data::Tokenizer::load(initial.source.tokenizer));
    const PromptSetOptions enc = prompt_set_options(config, params.config().vocab_size);
    train_data = data::PromptDataset::load_list(config.data.train_files, "data.train_files");
    train.emplace(train_data, *tokenizer, enc);
    // Checked before a round asks the prompt order for that many prompts
    // (rollout.gen_batch_size = 1e9 would allocate gigabytes of indices).
    if (config.rollout.gen_batch_size > train->size())
      throw UserError(cat(config.origin_of("rollout.gen_batch_size"), ": rollout.gen_batch_size = ",
                          config.rollout.gen_batch_size, " is more than the ", train->size(),
                          " training prompts of data.train_files: a round would hold prompts twice, sampled with "
                          "the same random numbers; set it to at most ", train->size()));
    if (!config.data.val_files.empty()) {
      val_data = data::PromptDataset::load_list(config.data.val_files, "data.val_files");
      val.emplace(val_data, *tokenizer, enc);
      check_prompt_positions(*val, config, params.config());
    }
    check_prompt_positions(*train, config, params.config());
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  if (root) {
    data::TruncationStats t = train->truncation();
    t.report(config.data.max_prompt_length, "training prompts");
    if (val) {
      t = val->truncation();
      t.report(config.data.max_prompt_length, "validation prompts");
    }
  }
  DAPO_INFO("train: ", train->size(), " training prompts", val ? cat(", ", val->size(), " validation problems") : "",
            ", model ", initial.source.path, initial.random_init ? " (random init)" : "", ", world ",
            grid.world_size(), " = tp ", grid.tp_size, " x dp ", grid.dp_size, gpu ? " on GPUs" : " on CPUs");

  std::optional<DapoTrainer> trainer;
  try {
    trainer.emplace(params, std::move(reference), grid, config, *tokenizer, *train, gpu.get());
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);

  // Resume: weights and optimizer state from the checkpoint, then the step
  // count and the prompt order; metrics.jsonl continues from that step.
  const std::string metrics_path = (fs::path(config.log.dir) / "metrics.jsonl").string();
  const std::optional<ResumePoint> resumed = resume_training(config, grid, params, trainer->optimizer());
  std::optional<MetricsWriter> metrics;
  try {
    if (resumed) {
      trainer->restore(resumed->step, resumed->order, resumed->path);
      trainer->restore_kv_cache_cap(resumed->kv_cache_cap_bytes);
      if (root) keep_metrics_through(metrics_path, resumed->step);
    }
    metrics.emplace(metrics_path, root, resumed ? MetricsWriter::Mode::append : MetricsWriter::Mode::truncate);
  } catch (const UserError& e) {
    error = e.what();
  }
  io::agree_on_error(grid.world, error);
  if (resumed) {
    DAPO_INFO("train: resumed from ", resumed->path, " at step ", resumed->step, " (prompt order epoch ",
              resumed->order.cursor.epoch, ", position ", resumed->order.cursor.position, ")");
    if (resumed->saved_tp != grid.tp_size || resumed->saved_dp != grid.dp_size)
      DAPO_INFO("train: resharded: saved with tp ", resumed->saved_tp, " x dp ", resumed->saved_dp,
                ", running with tp ", grid.tp_size, " x dp ", grid.dp_size,
                "; the prompt order is global and carries over, results match up to float rounding");
  }
  else
    DAPO_INFO("train: starting at step 0 from ", initial.source.path,
              config.checkpoint.resume == "auto" ? cat(" (no checkpoint in ", config.checkpoint.dir, ")") : "");
  trainer->set_progress(progress_lines("generate", 5.0));

  TrainSummary summary;
  summary.validated = val.has_value();
  if (resumed) {
    summary.resumed_from = resumed->path;
    summary.first_step = resumed->step;
  }
  // From here on a phase that runs past train.phase_timeout_s ends the job.
  Watchdog watchdog(config.train.phase_timeout_s, grid.world_rank());
  trainer->set_watchdog(&watchdog);
  watchdog.watch(&grid.world, "world");
  watchdog.watch(&grid.tp, "tp");
  watchdog.watch(&grid.dp, "dp");
  CheckpointSaver saver(config, grid, params, trainer->optimizer());
  // A stop must finish a save in flight and then save its own step: two
  // saves after the step in progress, inside checkpoint.stop_warning_s.
  const double warning_s = config.checkpoint.stop_warning_s;
  auto check_stop_window = [&](double save_s, const char* measured) {
    if (warning_s <= 0 || 2 * save_s <= warning_s) return false;
    if (root)
      DAPO_WARN("checkpoint: a save takes about ", save_s, " s (", measured, "); a stop signal must wait for a save "
                "in flight and then save its step, up to ", 2 * save_s, " s after the step in progress, more than ",
                config.origin_of("checkpoint.stop_warning_s"), ": checkpoint.stop_warning_s = ", warning_s,
                ": raise the job's warning time (Slurm --signal=B:USR1@N) and checkpoint.stop_warning_s with it, or "
                "the job may be killed before the state is saved");
    return true;
  };
  if (warning_s > 0) {
    const double probe_s = saver.probe_save_s();
    if (!check_stop_window(probe_s, cat(saver.host_bytes(), " bytes per rank at the speed of a write probe in ",
                                        config.checkpoint.dir).c_str()) && root)
      DAPO_INFO("checkpoint: a save takes about ", probe_s, " s at the probed write speed (", saver.host_bytes(),
                " bytes per rank); two fit in checkpoint.stop_warning_s = ", warning_s, " s with the step in progress "
                "if that step takes less than ", warning_s - 2 * probe_s, " s");
  }
  bool window_warned = false;
  auto committed = [&](const std::string& path) {
    if (path.empty()) return;
    summary.checkpoint = path;
    const double write_s = grid.world.all_reduce_f64(saver.last_write_s(), parallel::ReduceOp::max);
    DAPO_INFO("checkpoint: ", path, " (", saver.host_bytes(), " bytes per rank; the slowest rank's write ", write_s,
              " s)");
    if (!window_warned) window_warned = check_stop_window(write_s, "the slowest rank's write of the last save");
  };
  double save_stall_s = -1;  // of the save after the last step, for the next step's metrics
  auto save = [&](int64_t step) {
    watchdog.enter("checkpoint", step);
    // A save still in flight is finished (and committed) first.
    const std::string finished_first = saver.start(step, trainer->order(), trainer->kv_cache_cap_bytes());
    save_stall_s = saver.last_stall_s();
    committed(finished_first);
  };
  auto validate = [&](int64_t step, Metrics& m) {
    watchdog.enter("validate", step);
    const rollout::SamplingOptions sampling =
        rollout::validation_sampling_options(config, trainer->eos_ids(), 0);
    const ValidationResult v =
        run_validation(trainer->engine(), *val, sampling, trainer->rewards(), grid, progress_lines("validate", 5.0));
    if (gpu) gpu->check_flags("validation");
    v.add_to(m);
    log_validation(v, step);
    if (summary.val_k == 0) {
      summary.val_first = v.acc_mean;
      summary.val_first_step = step;
    }
    summary.val_k = v.k;
    summary.val_last = v.acc_mean;
    summary.val_last_step = step;
  };

  const RunLength length = plan_run_length(config, train->size());
  if (root) DAPO_INFO("train: planned steps: ", describe(length, config, train->size()));
  auto finished = [&] { return run_finished(length, trainer->steps_done(), trainer->order().cursor().epoch); };
  if (val && config.train.val_before_train && !resumed) {
    Metrics m;
    validate(0, m);
    metrics->write(0, m);
  }
  while (!finished()) {
    watchdog.enter("agree", trainer->steps_done());
    committed(saver.poll());
    if (const int sig = agree_on_stop(grid.world, signals)) {
      summary.stop_signal = sig;
      break;
    }
    DapoStepResult r;
    error.clear();
    try {
      r = trainer->step();
    } catch (const UserError& e) {
      error = e.what();  // dynamic sampling exhausted, a sequence over the token budget: the same on every rank
    }
    io::agree_on_error(grid.world, error);
    const bool last = finished();
    const bool due = config.train.val_every > 0 && r.step % config.train.val_every == 0;
    if (val && (due || last)) validate(r.step, r.metrics);
    if (dump_due(config, r.step)) {
      watchdog.enter("dump", r.step);
      const auto t0 = Clock::now();
      const std::string dump = write_step_dump(config, grid, trainer->rewards(), r.generation, r.step);
      r.metrics.add("timing_s/dump", seconds_since(t0));
      DAPO_INFO("dump: ", dump);
    }
    if (save_stall_s >= 0) r.metrics.add("timing_s/checkpoint_stall", std::exchange(save_stall_s, -1.0));
    metrics->write(r.step, r.metrics);
    if (r.step == summary.first_step + 1) summary.first_acc = r.metrics.get("gen/acc/mean");
    summary.last_acc = r.metrics.get("gen/acc/mean");
    if (config.log.every > 0 && (r.step % config.log.every == 0 || last))
      DAPO_INFO(dapo_step_line(r.step, std::max(length.steps, r.step), r.metrics));
    // After the step's metrics line (which shows the non-finite values),
    // before anything of it is saved.
    check_divergence(config, r.step, r.update, root);
    if (config.checkpoint.save_every > 0 && r.step % config.checkpoint.save_every == 0 && !last) save(r.step);
  }
  summary.steps = trainer->steps_done();
  // The last step's checkpoint, and any save still in flight (a stop
  // signal too waits for it: exit 4 means the state is on disk).
  const bool saved = saver.step_in_flight() == summary.steps ||
                     (!summary.checkpoint.empty() && fs::path(summary.checkpoint).filename() == checkpoint_name(summary.steps));
  if (summary.steps > summary.first_step && !saved) save(summary.steps);
  watchdog.enter("checkpoint", summary.steps);
  committed(saver.finish());
  // Why the run stops, in one line.
  if (summary.stop_signal)
    DAPO_INFO("train: stopping after step ", summary.steps, " on ", stop_signal_name(summary.stop_signal),
              summary.checkpoint.empty() ? std::string(" (nothing saved: no step was run)")
                                         : cat(": checkpoint ", summary.checkpoint),
              "; exit code ", kPreemptedExit, " (requeue to continue)");
  else if (summary.steps == summary.first_step)
    DAPO_INFO("train: nothing to do: the checkpoint is at step ", summary.steps, ", the end of the run's planned steps: ",
              describe(length, config, train->size()));
  else
    DAPO_INFO("train: done: ", summary.steps,
              length.by_epochs ? cat(" steps, train.total_epochs = ", length.epochs, " passes over the data")
                               : cat(" of train.total_steps = ", length.steps),
              "; final checkpoint ", summary.checkpoint);
  summary.seconds = seconds_since(start);
  return summary;
}

}  // namespace dapo::trainer
