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
#include "dapo/data/dataset.h"
#include "dapo/io/output_clash.h"
#include "dapo/parallel/grid.h"
#include "dapo/parallel/runtime.h"
#include "dapo/trainer/memory_plan.h"
#include "dapo/trainer/model_init.h"
#include "dapo/trainer/run_length.h"

namespace dapo::apps {

int run_info(const Invocation& inv) {
  parallel::Runtime runtime(nullptr, nullptr);
  const Config& config = *inv.config;
  try {
    configure_logging({runtime.world_rank(), config.log.all_ranks, parse_log_level(config.log.level)});
    if (inv.options.count("save") && inv.options.count("config"))  // --save may not replace the configuration read
      io::refuse_output_clash(inv.options["save"].as<std::string>(), "--save",
                              {{inv.options["config"].as<std::string>(), "--config"}});
    // --memory --ranks N plans a launch of N GPUs from this one (a login
    // node): this launch's own grid is then tp = 1.
    const bool planned_ranks = inv.options.count("ranks") > 0;
    const parallel::Grid grid = parallel::make_grid(planned_ranks ? 1 : int(config.parallel.tp));
#ifdef DAPO_WITH_CUDA
    const char* build = "cpu+cuda";
#else
    const char* build = "cpu";
#endif
    const bool gpus = cuda_available();
    // Planning a launch (--ranks) needs no GPU here: login nodes have none.
    if (config.parallel.backend == BackendChoice::cuda && !gpus && !planned_ranks)
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
    // The run's planned length, from the training prompts as listed
    // (data.truncation = skip may drop some when the run tokenizes them).
    // Planning from a login node may not see the data: then say why, and go on.
    if (grid.world_rank() == 0) {
      std::string line;
      if (config.data.train_files.empty()) {
        line = config.train.total_steps > 0
                   ? trainer::describe(trainer::plan_run_length(config, 1), config, 1)
                   : "not known (no data.train_files: the passes over them set the steps)";
      } else {
        try {
          const data::PromptDataset train =
              data::PromptDataset::load_list(config.data.train_files, "data.train_files");
          line = trainer::describe(trainer::plan_run_length(config, train.size()), config, train.size());
        } catch (const UserError& e) {
          line = cat("not known (", e.what(), ")");
        }
      }
      std::printf("# run length\nplanned steps: %s\n", line.c_str());
    }
    if (inv.options.count("memory") && inv.options["memory"].as<bool>()) {
      size_t total = size_t(80) << 30;
      std::string where = "80 GiB assumed: no GPU here; set --gpu-gib";
      if (inv.options.count("gpu-gib")) {
        const double g = inv.options["gpu-gib"].as<double>();
        // 1e6 GiB (a petabyte) is far beyond any GPU, and keeps the byte count exact.
        if (!(g > 0 && g < 1e6))
          throw UserError(cat("command line: --gpu-gib ", g, ": must be more than 0 and less than 1000000 GiB (one "
                              "GPU's memory, e.g. 80 or 141)"));
        total = size_t(g * double(size_t(1) << 30));
        where = "--gpu-gib";
      } else if (cuda_available()) {
        total = device_memory_total();
        where = "this GPU";
      }
      const model::Qwen2Config mc = trainer::initial_model_config(config, grid);
      int64_t tp = grid.tp_size, dp = grid.dp_size;
      if (planned_ranks) {
        const int64_t ranks = inv.options["ranks"].as<int64_t>();
        constexpr int64_t kMaxRanks = int64_t(1) << 20;  // far beyond any launch; ranks are 32-bit in MPI
        if (ranks > kMaxRanks)
          throw UserError(cat("command line: --ranks ", ranks, ": is more than ", kMaxRanks,
                              ", the most dapo plans for; give the number of GPUs of the launch"));
        tp = config.parallel.tp;
        if (ranks < 1 || ranks % tp != 0)
          throw UserError(cat("command line: --ranks ", ranks, ": must be a positive multiple of parallel.tp = ", tp, " (",
                              config.origin_of("parallel.tp"), ")"));
        dp = ranks / tp;
      }
      model::check_tp_compatible(mc, tp);
      const trainer::MemoryPlan plan = trainer::memory_plan(config, mc, tp, dp, total);
      if (grid.world_rank() == 0)
        std::printf("# GPU memory (%s), model %s: %d layers, hidden %lld\n%s", where.c_str(), config.model.path.c_str(),
                    int(mc.num_hidden_layers), (long long)mc.hidden_size,
                    trainer::format_memory_plan(plan, config).c_str());
    }
  } catch (const UserError& e) {
    std::fprintf(stderr, "dapo info: error: %s\n", e.what());
    if (runtime.world_size() > 1) parallel::Runtime::abort_job(kUserError);
    return kUserError;
  }
  return kOk;
}

}  // namespace dapo::apps
