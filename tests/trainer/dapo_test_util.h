// Crafted GRPO groups and a policy set up for the DAPO update-phase tests
// (tests/trainer and the mpirun layouts in tests/mpi).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "dapo/model/param_store.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/optim/adamw.h"
#include "dapo/parallel/grid.h"
#include "dapo/rl/group_data.h"
#include "dapo/trainer/update_phase.h"
#include "dapo/trainer/update_step.h"
#include "model/model_test_util.h"

namespace dapo::test {

// G groups of n responses with random prompt/response tokens, +1/-1 scores
// (mixed within each group), and a few responses masked out (overlong
// filtering), as the generation phase would hand them over.
inline std::vector<rl::GroupData> random_groups(int G, int n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<rl::GroupData> out(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    rl::GroupData& d = out[size_t(g)];
    d.uid = 1000 + g;
    d.position = g;
    const int P = 2 + int(gen() % 5);
    for (int i = 0; i < P; ++i) d.prompt_ids.push_back(int32_t(gen() % uint32_t(vocab)));
    for (int k = 0; k < n; ++k) {
      const int R = 1 + int(gen() % 6);
      for (int i = 0; i < R; ++i) d.response_ids.push_back(int32_t(gen() % uint32_t(vocab)));
      d.response_offsets.push_back(int64_t(d.response_ids.size()));
      const bool right = k == 0 ? true : k == 1 ? false : (gen() % 2 == 0);
      d.score.push_back(right ? 1.0 : -1.0);
      d.acc.push_back(right ? 1.0 : 0.0);
      d.reward.push_back((right ? 1.0 : -1.0) - 0.1 * double(gen() % 3));
      d.in_loss.push_back(gen() % 7 == 0 ? 0 : 1);
      d.finish_reason.push_back(0);
    }
  }
  return out;
}

// A policy (and optionally a frozen reference) on one grid.
struct Policy {
  std::unique_ptr<model::ParamStore> params, ref_params;
  std::unique_ptr<model::Qwen2Model> model, ref_model;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<trainer::UpdateRunner> actor, reference;

  Policy(const model::Qwen2Config& mc, const parallel::Grid& grid, const optim::AdamWOptions& opt, bool with_ref) {
    params = std::make_unique<model::ParamStore>(mc, grid.tp_rank, grid.tp_size);
    params->init_random(tiny_init(5));
    model = std::make_unique<model::Qwen2Model>(*params, grid.tp);
    optimizer = std::make_unique<optim::AdamW>(*params, opt);
    actor = std::make_unique<trainer::UpdateRunner>(*model, optimizer.get(), grid);
    if (with_ref) {
      ref_params = std::make_unique<model::ParamStore>(mc, grid.tp_rank, grid.tp_size);
      ref_params->init_random(tiny_init(5));
      ref_model = std::make_unique<model::Qwen2Model>(*ref_params, grid.tp);
      reference = std::make_unique<trainer::UpdateRunner>(*ref_model, nullptr, grid);
    }
  }
};

}  // namespace dapo::test
