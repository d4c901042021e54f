// write_step_dump: GenerationResult -> dump::write_rollout_dump.
#include "dapo/trainer/step_dump.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <utility>

#include "dapo/core/error.h"
#include "dapo/dump/rollout_dump.h"
#include "dapo/io/checkpoint.h"
#include "dapo/trainer/run_files.h"

namespace dapo::trainer {

bool dump_due(const Config& config, int64_t step) { return config.dump.every > 0 && step % config.dump.every == 0; }

std::string write_step_dump(const Config& config, const parallel::Grid& grid, const RewardSettings& rewards,
                            const GenerationResult& gen, int64_t step) {
  make_shared_dir(config.dump.dir, "dump.dir", grid);

  RewardSettings classify = rewards;
  classify.dynamic_sampling = true;  // the real class, also when every group is trained on
  std::vector<dump::DumpGroup> rows;
  // tp ranks > 0 hold copies of their dp group's groups: only tp rank 0 writes.
  if (grid.tp_rank == 0) {
    for (const rl::GroupData& g : gen.groups) rows.push_back({&g, group_outcome(g, classify), true});
    // The groups this rank generated that it did not hand to the update.
    std::set<std::pair<int64_t, int64_t>> selected;  // (round, local index) of this rank's selected groups
    for (const rl::SelectedGroup& s : gen.sampler.selection())
      if (s.rank == grid.dp_rank) selected.emplace(s.round, s.local_index);
    for (size_t r = 0; r < gen.rounds.size(); ++r)
      for (size_t i = 0; i < gen.rounds[r].size(); ++i)
        if (!selected.count({int64_t(r), int64_t(i)}))
          rows.push_back({&gen.rounds[r][i], group_outcome(gen.rounds[r][i], classify), false});
  }
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld.h5", (long long)step);
  const std::string path = (std::filesystem::path(config.dump.dir) / name).string();
  dump::DumpInfo info;
  info.step = step;
  info.config_ini = config_to_ini(config);
  info.n = config.rollout.n;
  info.max_response_length = config.rollout.max_response_length;
  dump::write_rollout_dump(path, grid.world, rows, info);
  return path;
}

}  // namespace dapo::trainer
