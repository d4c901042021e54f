// The rollout dump of one DAPO step (dump/rollout_dump.h for the file):
// every group the step generated, in every generation round - the ones it
// trained on (with advantages and old log-probs) and the ones dynamic
// sampling dropped or did not need - written by the ranks together to
// dump.dir/step_%08d.h5 every dump.every steps.
//
// Each group's `outcome` is its class under algorithm.filter_metric even
// when dynamic sampling is off (then every group is trained on, and the
// outcome shows which ones carried no signal).
#pragma once

#include <string>

#include "dapo/core/config.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/generation_phase.h"
#include "dapo/trainer/rollout_groups.h"

namespace dapo::trainer {

// Whether step `step` (1-based) is dumped: dump.every > 0 and step is a multiple.
bool dump_due(const Config& config, int64_t step);

// Writes the dump of step `step` from `gen` (this rank's groups). Collective
// over grid.world; returns the file's path. UserError (every rank) when
// dump.dir cannot be created or the file cannot be written.
std::string write_step_dump(const Config& config, const parallel::Grid& grid, const RewardSettings& rewards,
                            const GenerationResult& gen, int64_t step);

}  // namespace dapo::trainer
