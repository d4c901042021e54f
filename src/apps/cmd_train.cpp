// `dapo train --config C.ini`: DAPO training (the work is in
// trainer/train_job). Runs on one rank or under mpirun/srun with
// parallel.tp ranks per model copy and the batch split over dp.
#include <cstdio>

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
  // still finishing when the first one exits) never kills a rank.
  const trainer::StopSignals signals;
  parallel::Runtime runtime(nullptr, nullptr);
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
    const trainer::TrainSummary s = trainer::run_train_job(config, grid, signals);
    // The summary's first words are what jobs/demo.sh reads.
    if (s.stop_signal) return trainer::kPreemptedExit;
    if (s.steps == s.first_step) return kOk;  // resumed at the end: nothing was run
    if (s.validated)
      DAPO_INFO("train: accuracy ", s.val_first, " -> ", s.val_last, " over ", s.val_last_step - s.val_first_step,
                " steps (validation mean@", s.val_k, " at steps ", s.val_first_step, " and ", s.val_last_step,
                "); sampled accuracy ", s.first_acc, " -> ", s.last_acc, "; ", s.seconds, " s; model saved to ",
                s.checkpoint);
    else
      DAPO_INFO("train: sampled accuracy ", s.first_acc, " -> ", s.last_acc, " over ", s.steps, " steps; ", s.seconds,
                " s; model saved to ", s.checkpoint);
  } catch (const UserError& e) {
    // The job raises its errors on every rank alike: one line is enough.
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo train: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
