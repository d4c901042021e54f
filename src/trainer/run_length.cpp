// The run's planned length (run_length.h).
#include "dapo/trainer/run_length.h"

#include "dapo/core/error.h"

namespace dapo::trainer {

RunLength plan_run_length(const Config& config, int64_t train_prompts) {
  DAPO_CHECK(train_prompts >= 1, "plan_run_length: ", train_prompts, " prompts");
  RunLength r;
  if (config.train.total_steps > 0) {
    r.steps = config.train.total_steps;
    return r;
  }
  r.by_epochs = true;
  r.epochs = config.train.total_epochs;
  const int64_t G = config.rollout.gen_batch_size;
  // epochs * prompts can exceed int64 only for absurd values: refuse them by name.
  if (r.epochs > (int64_t(1) << 62) / train_prompts)
    throw UserError(cat(config.origin_of("train.total_epochs"), ": train.total_epochs = ", r.epochs,
                        " passes over ", train_prompts, " prompts is too many"));
  r.rounds = (r.epochs * train_prompts + G - 1) / G;
  r.steps = r.rounds;
  return r;
}

std::string describe(const RunLength& r, const Config& config, int64_t train_prompts) {
  if (!r.by_epochs) return cat(r.steps, " (train.total_steps)");
  return cat("at most ", r.steps, " (train.total_epochs = ", r.epochs, " pass", r.epochs == 1 ? "" : "es", " over ",
             train_prompts, " prompts: ", r.rounds, " generation rounds of rollout.gen_batch_size = ",
             config.rollout.gen_batch_size, "; dynamic sampling may take several rounds a step)");
}

bool run_finished(const RunLength& r, int64_t steps_done, int64_t epoch) {
  if (steps_done >= r.steps) return true;
  return r.by_epochs && epoch >= r.epochs;
}

}  // namespace dapo::trainer
