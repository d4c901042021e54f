// `dapo generate --config C.ini --checkpoint CK.h5 --input P.jsonl --output
// O.jsonl`: sample responses for JSONL prompts (the work is in
// rollout/generate_job). Runs on one rank or under mpirun/srun with
// parallel.tp ranks per model copy and the prompts split over dp.
#include <cstdio>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/rollout/generate_job.h"

namespace dapo::apps {
namespace {

int64_t positive_option(const Invocation& inv, const char* name) {
  const int64_t v = inv.options[name].as<int64_t>();
  if (v < 1) throw UserError(cat("command line: --", name, " must be at least 1, not ", v));
  return v;
}

rollout::GenerateJob job_of(const Invocation& inv) {
  if (!inv.options.count("input") || !inv.options.count("output"))
    throw UserError("command line: dapo generate needs --input P.jsonl and --output O.jsonl");
  rollout::GenerateJob job;
  if (inv.options.count("checkpoint")) job.checkpoint = inv.options["checkpoint"].as<std::string>();
  job.input = inv.options["input"].as<std::string>();
  job.output = inv.options["output"].as<std::string>();
  const double mib = inv.options["kv-cache-mib"].as<double>();
  if (!(mib >= 0)) throw UserError(cat("command line: --kv-cache-mib must be >= 0 (0: automatic), not ", mib));
  job.engine.kv_cache_bytes = size_t(mib * 1048576.0);
  job.engine.block_size = positive_option(inv, "block-size");
  job.engine.max_num_seqs = positive_option(inv, "max-num-seqs");
  job.engine.max_batch_tokens = positive_option(inv, "max-batch-tokens");
  return job;
}

}  // namespace

int run_generate(const Invocation& inv) {
  const Config& config = *inv.config;
  parallel::Runtime runtime(nullptr, nullptr);
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    const rollout::GenerateJob job = job_of(inv);
    const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
    const rollout::GenerateSummary s = rollout::run_generate_job(config, job, grid);
    if (runtime.world_rank() == 0)
      DAPO_INFO("generate: ", s.prompts, " prompts (", s.skipped, " skipped), ", s.responses, " responses (", s.eos,
                " ended by EOS), ", s.tokens, " tokens in ", s.seconds, " s -> ", job.output);
  } catch (const UserError& e) {
    // The job raises its errors on every rank alike: one line is enough.
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo generate: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
