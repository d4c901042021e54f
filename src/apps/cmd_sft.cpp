// `dapo sft --config C.ini --data SFT.jsonl`: the supervised warm start
// (the work is in trainer/sft_job). Runs on one rank or under mpirun/srun
// with parallel.tp ranks per model copy and the batch split over dp.
// Over a finished run's sft_final.h5 it does nothing (exit 0) or refuses
// (exit 2), never replaces it (trainer/sft_job.h).
#include <cstdio>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/sft_job.h"

namespace dapo::apps {

int run_sft(const Invocation& inv) {
  const Config& config = *inv.config;
  parallel::Runtime runtime(nullptr, nullptr);
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    const std::string data = inv.options.count("data") ? inv.options["data"].as<std::string>() : "";
    const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
    const trainer::SftSummary s = trainer::run_sft_job(config, data, grid);
    if (s.nothing_to_do) return kOk;  // a finished run's model is there: said so, nothing written
    DAPO_INFO("sft: ", s.steps, " steps on ", s.examples, " pairs, loss ", s.first_loss, " -> ", s.last_loss, " in ",
              s.seconds, " s; model saved to ", s.checkpoint);
  } catch (const UserError& e) {
    // The job raises its errors on every rank alike: one line is enough.
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo sft: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
