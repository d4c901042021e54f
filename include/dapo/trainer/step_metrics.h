// The metrics of one DAPO step, reduced over ranks, with verl's names where
// verl has one (docs/DESIGN.md section 4):
//   gen/acc/mean, gen/score/mean, gen/response_length/mean,
//   gen/response_length/clip_ratio       every generated response of every round
//                                        (before dynamic sampling: the policy's
//                                        sampled accuracy)
//   critic/score/{mean,max,min}, critic/rewards/{mean,max,min},
//   critic/advantages/{mean,max,min}, critic/acc/mean
//                                        the training batch (kept groups), per response
//   response_length/{mean,max,min,clip_ratio}, prompt_length/{mean,max,min}
//                                        the training batch; clip_ratio: share that
//                                        hit rollout.max_response_length
//   train/num_gen_batches, train/num_groups_generated, train/num_groups_all_correct,
//   train/num_groups_all_wrong, train/num_groups_kept, train/kept_ratio (kept / generated groups),
//   train/balance_moves, train/balance_imbalance (max/min tokens of a rank - 1, worst mini-batch)
//   actor/pg_loss, actor/kl_loss (mean over mini-batches), actor/entropy,
//   actor/pg_clipfrac (either bound), actor/pg_clipfrac_high (clip-higher bound,
//   A > 0), actor/pg_clipfrac_low (lower bound, A < 0), actor/pg_clipfrac_lower
//   (dual clip), actor/ppo_kl, actor/grad_norm (mean over optimizer steps),
//   actor/lr, actor/skipped_steps
//   timing_s/{gen,reward,balance,old_log_prob,ref,update_actor,step}
//   perf/total_num_tokens (training batch, prompt + response), perf/throughput
//   (those per second per rank, verl's definition), perf/gen_throughput
//   (generated tokens per second of generation, all dp groups together)
// Times are world rank 0's (max over ranks for the phases).
#pragma once

#include <string>

#include "dapo/core/config.h"
#include "dapo/parallel/grid.h"
#include "dapo/trainer/generation_phase.h"
#include "dapo/trainer/metrics_writer.h"
#include "dapo/trainer/update_phase.h"

namespace dapo::trainer {

// Collective over grid.world (reductions over dp, times over world).
Metrics dapo_step_metrics(const Config& config, const parallel::Grid& grid, const GenerationResult& gen,
                          const UpdatePhaseResult& update, double step_seconds);

// One readable console line of a step's metrics.
std::string dapo_step_line(int64_t step, int64_t total_steps, const Metrics& m);

}  // namespace dapo::trainer
