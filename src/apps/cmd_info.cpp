// `dapo info`: what this build and this launch look like - backend, ranks,
// hosts, the tp x dp grid - and the resolved configuration. Run it under
// mpirun/srun to check a launch before spending hours of a job on it.
#include <cstdio>
#include <cstring>
#include <fstream>

#include "command.h"
#include "dapo/core/arena.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"

namespace dapo::apps {

int run_info(const Invocation& inv) {
  parallel::Runtime runtime(nullptr, nullptr);
  const Config& config = *inv.config;
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    const parallel::Grid grid = parallel::make_grid(int(config.parallel.tp));
#ifdef DAPO_WITH_CUDA
    const char* build = "cpu+cuda";
#else
    const char* build = "cpu";
#endif
    const bool gpus = cuda_available();
    if (config.parallel.backend == BackendChoice::cuda && !gpus)
      throw UserError(cat(config.origin_of("parallel.backend"),
                          ": parallel.backend = cuda, but this build or machine has no usable GPU"));
    const char* backend = config.parallel.backend == BackendChoice::cpu ? "cpu"
                          : config.parallel.backend == BackendChoice::cuda ? "cuda"
                          : gpus ? "cuda" : "cpu";
    DAPO_INFO("dapo ", DAPO_VERSION, " build=", build, " backend=", backend, " world=", grid.world_size(),
              " tp=", grid.tp_size, " dp=", grid.dp_size);
    // One line per rank, gathered in rank order so the output is readable.
    const std::string mine = cat("rank ", grid.world_rank(), " host ", host_name(), " local_rank ",
                                 runtime.local_rank(), " tp_rank ", grid.tp_rank, " dp_rank ", grid.dp_rank);
    std::vector<std::vector<std::byte>> to_each(size_t(grid.world_size()));
    to_each[0].resize(mine.size());
    std::memcpy(to_each[0].data(), mine.data(), mine.size());
    std::vector<int64_t> sizes;
    const std::vector<std::byte> got = grid.world.all_to_all_v(to_each, &sizes);
    size_t offset = 0;
    for (const int64_t n : sizes) {
      DAPO_INFO(std::string(reinterpret_cast<const char*>(got.data()) + offset, size_t(n)));
      offset += size_t(n);
    }
    const std::string ini = config_to_ini(config);
    if (grid.world_rank() == 0) {
      std::printf("# resolved configuration\n%s", ini.c_str());
      if (inv.options.count("save")) {
        const std::string path = inv.options["save"].as<std::string>();
        std::ofstream out(path);
        if (!(out << ini)) throw UserError(cat(path, ": cannot write the configuration"));
        DAPO_INFO("configuration saved to ", path);
      }
    }
  } catch (const UserError& e) {
    std::fprintf(stderr, "dapo info: error: %s\n", e.what());
    if (runtime.world_size() > 1) parallel::Runtime::abort_job(kUserError);
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
