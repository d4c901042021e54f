// `dapo inspect DUMP.h5 [--show K] [--jsonl]`: a rollout dump's summary,
// K samples in full, or every response as JSONL on stdout (the work is in
// dump/inspect). Reads the file in this process alone: no MPI start-up.
#include <cstdio>
#include <iostream>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/dump/inspect.h"
#include "dapo/dump/rollout_dump.h"

namespace dapo::apps {

int run_inspect(const Invocation& inv) {
  if (!inv.options.count("dump")) throw UserError("command line: dapo inspect needs a rollout dump: dapo inspect DUMP.h5");
  const std::string path = inv.options["dump"].as<std::string>();
  const int show = inv.options["show"].as<int>();
  if (show < 0) throw UserError(cat("command line: --show must be >= 0, not ", show));
  const bool jsonl = inv.options["jsonl"].as<bool>();
  if (jsonl && show > 0) throw UserError("command line: --show and --jsonl do not go together");

  const dump::RolloutDump d = dump::read_rollout_dump(path);
  std::ios::sync_with_stdio(false);
  if (jsonl) {
    dump::write_dump_jsonl(d, std::cout);
  } else {
    std::cout << dump::dump_summary(d);
    if (show > 0) std::cout << "\n" << dump::dump_samples(d, show);
  }
  std::cout.flush();
  if (!std::cout) throw UserError("<stdout>: write failed");
  return kOk;
}

}  // namespace dapo::apps
