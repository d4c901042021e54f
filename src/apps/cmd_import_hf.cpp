// `dapo import-hf --hf-dir D --output C.h5`: an HF model directory into a
// step-0 checkpoint (the work is in io/hf_convert). Runs on one rank or
// under mpirun/srun, the ranks sharing the conversion.
#include <cstdio>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/output_clash.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"

namespace dapo::apps {

int run_import_hf(const Invocation& inv) {
  if (!inv.options.count("hf-dir") || !inv.options.count("output"))
    throw UserError("command line: dapo import-hf needs --hf-dir D and --output C.h5");
  const std::string hf_dir = inv.options["hf-dir"].as<std::string>();
  const std::string output = inv.options["output"].as<std::string>();
  parallel::Runtime runtime(nullptr, nullptr);
  configure_logging({runtime.world_rank(), false, LogLevel::info});
  try {
    std::vector<io::InputFile> inputs;
    io::refuse_standard_output(output, "--output", "an HDF5 checkpoint, written by seeking");
    io::add_model_inputs(inputs, hf_dir, "--hf-dir");
    io::refuse_output_clash(output, "--output", inputs);  // every rank alike
    const parallel::Comm world = parallel::Comm::world();
    io::import_hf(hf_dir, output, world);
  } catch (const UserError& e) {
    // import_hf raises its errors on every rank alike: one line is enough.
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo import-hf: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
