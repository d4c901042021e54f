// Validation (`dapo eval`, and `dapo train` every train.val_every steps):
// k = rollout.val_n responses per problem with the validation sampling
// settings, verified as in training, reported per data source as verl's
// DAPO recipe does:
//   val-core/<source>/acc/mean@k     mean accuracy over all k samples of all problems (avg@k)
//   val-core/<source>/acc/pass@k     fraction of problems with at least one correct sample
//   val-aux/<source>/score/mean@k    mean verifier score (+1/-1)
//   val-aux/<source>/response_length/mean
//   val-aux/<source>/<other>/acc/mean@k, .../pass@k   the same responses under
//       the verifier the run does not use (reward.verifier = math_dapo:
//       symbolic; symbolic: math_dapo), so that accuracies compare with the
//       paper's whichever verifier trains
//
// The sampler's stream key is the same at every validation (a constant, not
// the training step), so two validations of a run differ only by the
// weights: common random numbers, which take most of the sampling noise
// out of the comparison between steps. Problems are split over dp ranks in
// contiguous runs; the result does not depend on the dp or tp size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dapo/parallel/grid.h"
#include "dapo/rollout/engine.h"
#include "dapo/trainer/metrics_writer.h"
#include "dapo/trainer/prompt_set.h"
#include "dapo/trainer/rollout_groups.h"

namespace dapo::trainer {

// The sampler's `step` field for validation.
uint64_t validation_step_key();

struct SourceValidation {
  std::string source;
  int64_t problems = 0;
  double acc_mean = 0;      // avg@k
  double acc_pass = 0;      // pass@k
  double score_mean = 0;
  double length_mean = 0;   // response tokens
  double other_acc_mean = 0;  // avg@k and pass@k under the other verifier
  double other_acc_pass = 0;
};

struct ValidationResult {
  int64_t k = 0;
  RewardVerifier verifier = RewardVerifier::symbolic;        // the run's: val-core
  RewardVerifier other_verifier = RewardVerifier::math_dapo;  // beside it: val-aux
  int64_t problems = 0;
  double acc_mean = 0;      // over every problem of every source
  double acc_pass = 0;
  std::vector<SourceValidation> sources;  // by source name
  double seconds = 0;

  // The metrics above, and timing_s/testing.
  void add_to(Metrics& metrics) const;
};

// Collective over grid.world; the result is the same on every rank.
// sampling.step is replaced by validation_step_key().
ValidationResult run_validation(rollout::GenerationEngine& engine, const PromptSet& problems,
                                rollout::SamplingOptions sampling, const RewardSettings& rewards,
                                const parallel::Grid& grid, const rollout::ProgressCallback& progress = {});

}  // namespace dapo::trainer
