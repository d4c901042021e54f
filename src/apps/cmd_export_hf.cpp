// `dapo export-hf --checkpoint C.h5 --output D [--dtype f32|bf16]`: a
// checkpoint's model as an HF directory (config.json + model.safetensors)
// that transformers loads (the work is in io/hf_convert). The output folder
// must be new or empty: a non-empty one is refused (exit code 2) rather
// than mixed with an older model's files.
#include <cstdio>

#include "command.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/io/hf_convert.h"
#include "dapo/io/output_clash.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"

namespace dapo::apps {

int run_export_hf(const Invocation& inv) {
  if (!inv.options.count("checkpoint") || !inv.options.count("output"))
    throw UserError("command line: dapo export-hf needs --checkpoint C.h5 and --output D");
  const std::string checkpoint = inv.options["checkpoint"].as<std::string>();
  const std::string output = inv.options["output"].as<std::string>();
  const io::ExportDtype dtype = io::parse_export_dtype(inv.options["dtype"].as<std::string>());
  parallel::Runtime runtime(nullptr, nullptr);
  configure_logging({runtime.world_rank(), false, LogLevel::info});
  try {
    io::refuse_standard_output(output, "--output", "a model folder of several files");
    io::refuse_output_clash(output, "--output", {{checkpoint, "--checkpoint"}});
    const parallel::Comm world = parallel::Comm::world();
    io::export_hf(checkpoint, output, dtype, world);
  } catch (const UserError& e) {
    // export_hf raises its errors on every rank alike: one line is enough.
    if (runtime.world_rank() == 0) std::fprintf(stderr, "dapo export-hf: error: %s\n", e.what());
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
