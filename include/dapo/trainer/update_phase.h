// Phases 6-8 of a DAPO step (docs/DESIGN.md section 2) on this rank's share of
// the kept groups: GRPO advantages, old (and reference) log-probs from a
// forward pass with the weights before the update, then for each of
// train.ppo_epochs passes and each mini-batch one AdamW step on the policy
// loss of rl/policy_loss.h.
//
// The mini-batch's loss normaliser (tokens, sequences) is all-reduced over
// dp before its first micro-batch, so the step equals the one a single rank
// would take on the whole mini-batch (gradients are SUMMED over dp). A
// mini-batch with no token in the loss on any rank (everything masked by
// overlong filtering) still takes its optimizer step with zero gradients,
// as verl does (weight decay and momentum still act).
//
// Each rank packs its groups of mini-batch m into micro-batches of at most
// train.max_token_len_per_gpu tokens; a rank may have no group in a
// mini-batch and still joins its collectives.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dapo/core/config.h"
#include "dapo/parallel/grid.h"
#include "dapo/rl/group_data.h"
#include "dapo/rl/policy_loss.h"
#include "dapo/trainer/update_step.h"

namespace dapo::trainer {

struct UpdatePhaseResult {
  // Summed over every mini-batch and epoch and all dp ranks: the loss terms
  // are sums of mini-batch losses (divide by optimizer_steps for a mean),
  // the counts sums of tokens.
  rl::PolicyLossMetrics loss;
  int64_t optimizer_steps = 0;    // mini-batches x epochs
  int64_t skipped_steps = 0;      // non-finite gradient norm
  double grad_norm_mean = 0;      // over the optimizer steps that were not skipped
  double lr = 0;
  // The sampler against the trainer, over this rank's trained response
  // tokens with the engine's log-prob q and the old log-prob p (this
  // rank's sums; reduce over dp): k3 = p/q - 1 - log(p/q), whose mean
  // estimates KL(sampler || trainer), and |log p - log q|. With
  // old_from_sampler there is no old-log-prob pass: p is then the update's
  // own forward over the first mini-batch, before the first AdamW step.
  struct RolloutCorrection {
    double tokens = 0, k3_sum = 0, abs_diff_sum = 0, abs_diff_max = 0;
  };
  RolloutCorrection rollout_corr;
  double old_logprob_s = 0;       // wall times of this rank
  double ref_s = 0;
  double update_s = 0;
};

struct UpdatePhaseContext {
  UpdateRunner* actor = nullptr;      // the policy (with its optimizer)
  UpdateRunner* reference = nullptr;  // a frozen copy of the start; nullptr when algorithm.kl_coef == 0
  rl::PolicyLossOptions loss;
  bool norm_adv_by_std = true;
  float inv_temperature = 1.0f;       // 1 / rollout.temperature
  int64_t ppo_epochs = 1;
  int64_t max_token_len = 1;          // train.max_token_len_per_gpu
  // rollout.exact_logprobs: the engine's log-probs (bit for bit the
  // trainer's, Qwen2Model's batch-invariant mode) are the old log-probs;
  // no scoring pass runs.
  bool old_from_sampler = false;
};
UpdatePhaseContext update_phase_context(const Config& config, UpdateRunner& actor, UpdateRunner* reference);

// groups: this rank's groups; mini_batch[i] the mini-batch of groups[i]
// (0 .. num_mini_batches-1, the same count on every rank). Fills each
// group's advantage and old_logprobs. Collective over grid.world.
UpdatePhaseResult run_update_phase(const UpdatePhaseContext& ctx, const parallel::Grid& grid,
                                   std::vector<rl::GroupData>& groups, std::span<const int64_t> mini_batch,
                                   int64_t num_mini_batches, double lr);

}  // namespace dapo::trainer
