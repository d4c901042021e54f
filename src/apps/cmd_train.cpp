// `dapo train --config C.ini`: DAPO training (the work is in
// trainer/train_job). Runs on one rank or under mpirun/srun with
// parallel.tp ranks per model copy and the batch split over dp.
#include <cstdio>
#include <string>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/stop_signals.h"
#include "dapo/trainer/train_job.h"

namespace dapo::apps {

int run_train(const Invocation& inv) {
  const Config& config = *inv.config;
  // Before MPI starts and until after it finalises: a SIGUSR1/SIGTERM (Slurm
  // sends them to every task, and `srun -K1` sends SIGTERM to the ranks
  // still finishing when the first one exits), Ctrl-C's SIGINT or a closed
  // terminal's SIGHUP never kills a rank.
  const trainer::StopSignals signals;
  parallel::Runtime runtime(nullptr, nullptr);
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
    const trainer::TrainSummary s = trainer::run_train_job(config, grid, signals);
    // The summary's first words are what jobs/demo.sh reads.
    if (s.stop_signal) return trainer::kPreemptedExit;
    if (s.steps == s.first_step) return kOk;  // resumed at the end: nothing was run
    // Only what was measured: "X -> Y over N steps" needs two validations
    // (train.val_before_train = false, or a resumed run, validates at the
    // end only), and the sampled accuracy is this run's first and last step.
    const std::string sampled =
        s.steps > s.first_step + 1
            ? cat("sampled accuracy ", s.first_acc, " -> ", s.last_acc, " (steps ", s.first_step + 1, " and ", s.steps,
                  ")")
            : cat("sampled accuracy ", s.last_acc, " (step ", s.steps, ")");
    const std::string tail = cat("; ", s.seconds, " s; model saved to ", s.checkpoint);
    if (s.validated && s.val_k > 0 && s.val_last_step > s.val_first_step)
      DAPO_INFO("train: accuracy ", s.val_first, " -> ", s.val_last, " over ", s.val_last_step - s.val_first_step,
                " steps (validation mean@", s.val_k, " at steps ", s.val_first_step, " and ", s.val_last_step, "); ",
                sampled, tail);
    else if (s.validated && s.val_k > 0)
      DAPO_INFO("train: validation accuracy ", s.val_last, " at step ", s.val_last_step, " (mean@", s.val_k,
                "; the only validation of this run: ",
                s.first_step > 0 ? cat("it resumed at step ", s.first_step, ", which validates at the end only")
                                 : std::string("train.val_before_train = false"),
                "); ", sampled, tail);
    else
      DAPO_INFO("train: ", s.validated ? "no validation ran; " : "", sampled, tail);
  } catch (const UserError& e) {
    // The job raises its errors on every rank alike: one line is enough.
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo train: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
