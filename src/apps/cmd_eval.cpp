// `dapo eval --config C.ini --checkpoint CK.h5 --data D.jsonl`: avg@k and
// pass@k per data source (the work is in trainer/eval_job).
#include <cstdio>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/eval_job.h"

namespace dapo::apps {

int run_eval(const Invocation& inv) {
  const Config& config = *inv.config;
  parallel::Runtime runtime(nullptr, nullptr);
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    trainer::EvalJob job;
    if (inv.options.count("checkpoint")) job.checkpoint = inv.options["checkpoint"].as<std::string>();
    if (inv.options.count("data")) job.data = inv.options["data"].as<std::string>();
    if (inv.options.count("output")) job.output = inv.options["output"].as<std::string>();
    const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
    const trainer::ValidationResult r = trainer::run_eval_job(config, job, grid);
    for (const trainer::SourceValidation& s : r.sources)
      DAPO_INFO("eval: ", s.source, ": mean@", r.k, " ", s.acc_mean, "  pass@", r.k, " ", s.acc_pass, "  (",
                to_string(r.verifier), "; ", to_string(r.other_verifier), ": ", s.other_acc_mean, ", ",
                s.other_acc_pass, ")  score ", s.score_mean, "  response length ", s.length_mean, "  (", s.problems,
                " problems)");
    DAPO_INFO("eval: all: mean@", r.k, " ", r.acc_mean, "  pass@", r.k, " ", r.acc_pass, "  (", r.problems,
              " problems, ", r.seconds, " s)");
  } catch (const UserError& e) {
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo eval: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
