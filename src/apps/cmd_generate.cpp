// `dapo generate --config C.ini --checkpoint CK.h5 --input P.jsonl --output
// O.jsonl`: sample responses for JSONL prompts (the work is in
// rollout/generate_job). Runs on one rank or under mpirun/srun with
// parallel.tp ranks per model copy and the prompts split over dp.
#include <cstdio>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/output_clash.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/rank_device.h"
#include "dapo/parallel/runtime.h"
#include "dapo/rollout/generate_job.h"
#include "dapo/rollout/model_source.h"

namespace dapo::apps {
namespace {

rollout::GenerateJob job_of(const Invocation& inv, const Config& config) {
  if (!inv.options.count("input") || !inv.options.count("output"))
    throw UserError("command line: dapo generate needs --input P.jsonl and --output O.jsonl");
  rollout::GenerateJob job;
  if (inv.options.count("checkpoint")) job.checkpoint = inv.options["checkpoint"].as<std::string>();
  job.input = inv.options["input"].as<std::string>();
  job.output = inv.options["output"].as<std::string>();
  job.engine = rollout::engine_options(config);
  // --output may not replace anything the job reads.
  const rollout::ModelSource source = rollout::resolve_model_source(job.checkpoint, config.model);
  std::vector<io::InputFile> inputs{{job.input, "--input"}};
  io::add_model_inputs(inputs, source.path, job.checkpoint.empty() ? "model.path" : "--checkpoint");
  io::add_tokenizer_inputs(inputs, source.tokenizer, config.model.tokenizer.empty() ? "the tokenizer" : "model.tokenizer");
  io::refuse_output_clash(job.output, "--output", inputs);
  return job;
}

}  // namespace

int run_generate(const Invocation& inv) {
  const Config& config = *inv.config;
  parallel::Runtime runtime(nullptr, nullptr);
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    const rollout::GenerateJob job = job_of(inv, config);
    const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
    const std::unique_ptr<ops::CudaDevice> gpu = trainer::open_rank_device(config, grid, grid.local_rank);
    const rollout::GenerateSummary s = rollout::run_generate_job(config, job, grid, gpu.get());
    if (runtime.world_rank() == 0)
      DAPO_INFO("generate: ", s.prompts, " prompts (", s.skipped, " skipped), ", s.responses, " responses (", s.eos,
                " ended by EOS), ", s.tokens, " tokens in ", s.seconds, " s -> ", job.output == "-" ? "<stdout>" : job.output);
  } catch (const UserError& e) {
    // The job raises its errors on every rank alike: one line is enough.
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo generate: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
