// `dapo eval --config C.ini --checkpoint CK.h5 --data D.jsonl`: avg@k and
// pass@k per data source (the work is in trainer/eval_job).
#include <cstdio>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/data/dataset.h"
#include "dapo/io/output_clash.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/rollout/model_source.h"
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
    if (!job.output.empty()) {  // --output may not replace anything the job reads
      std::vector<io::InputFile> inputs;
      const std::string files = !job.data.empty() ? job.data : config.data.val_files;
      if (!files.empty())
        for (const std::string& f : data::split_file_list(files, job.data.empty() ? "data.val_files" : "--data"))
          inputs.push_back({f, job.data.empty() ? "data.val_files" : "--data"});
      const rollout::ModelSource source = rollout::resolve_model_source(job.checkpoint, config.model);
      io::add_model_inputs(inputs, source.path, job.checkpoint.empty() ? "model.path" : "--checkpoint");
      io::add_tokenizer_inputs(inputs, source.tokenizer,
                               config.model.tokenizer.empty() ? "the tokenizer" : "model.tokenizer");
      io::refuse_output_clash(job.output, "--output", inputs);
    }
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
