// Test helper: the trainer's log-probs of a rollout's response tokens,
// packed as the trainer packs them (several sequences per batch, each its
// prompt then its response, targets the next token), for comparing the
// engine's recorded log-probs with the trainer's (rollout.exact_logprobs).
#pragma once

#include <omp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/model/qwen2_model.h"
#include "dapo/rollout/rollout_batch.h"

namespace dapo::test {

struct PackedResponses {
  std::vector<int32_t> tokens, positions, cu{0}, targets;
  std::vector<std::pair<int64_t, int64_t>> at;  // (response, row of its first token's log-prob)

  void add(const rollout::RolloutBatch& b, int64_t r) {
    const auto prompt = b.prompt(b.response_prompt[size_t(r)]);
    const auto resp = b.response(r);
    const int64_t base = int64_t(tokens.size()), P = int64_t(prompt.size());
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    tokens.insert(tokens.end(), resp.begin(), resp.end());
    const int64_t L = int64_t(tokens.size()) - base;
    for (int64_t i = 0; i < L; ++i) {
      positions.push_back(int32_t(i));
      targets.push_back(i + 1 < L ? tokens[size_t(base + i + 1)] : 0);
    }
    cu.push_back(int32_t(tokens.size()));
    at.emplace_back(r, base + P - 1);
  }
  model::PackedBatch batch() {
    const int64_t T = int64_t(tokens.size());
    return {tensor_i32(tokens.data(), {T}), tensor_i32(positions.data(), {T}),
            tensor_i32(cu.data(), {int64_t(cu.size())}), tensor_i32(targets.data(), {T})};
  }
};

// The log-prob of every response token of b (in b.sampling_logprobs'
// order) from m's forward_logprob over packs of `per_pack` responses, or
// from forward_train when `train`. CPU backend; collective at tp > 1.
inline std::vector<float> trainer_logprobs(const model::Qwen2Model& m, const rollout::RolloutBatch& b,
                                           float inv_temperature, int64_t per_pack, bool train) {
  std::vector<float> out(b.sampling_logprobs.size(), 0.0f);
  for (int64_t r0 = 0; r0 < b.num_responses(); r0 += per_pack) {
    PackedResponses p;
    for (int64_t r = r0; r < std::min(b.num_responses(), r0 + per_pack); ++r) p.add(b, r);
    const int64_t T = int64_t(p.tokens.size());
    Arena act(train ? m.train_activation_bytes(T) : m.inference_activation_bytes(T), Device::cpu, "act");
    Arena scratch(m.scratch_bytes(T, T, 0, omp_get_max_threads()) + Arena::kAlign, Device::cpu, "scratch");
    ops::Ctx ctx;
    ctx.scratch = &scratch;
    std::vector<float> lp(static_cast<size_t>(T)), en(static_cast<size_t>(T));
    const Tensor lp_t = tensor_f32(lp.data(), {T}), en_t = tensor_f32(en.data(), {T});
    if (train) {
      model::Activations saved;
      m.forward_train(ctx, act, p.batch(), inv_temperature, lp_t, en_t, saved);
    } else {
      m.forward_logprob(ctx, act, p.batch(), inv_temperature, lp_t, en_t);
    }
    for (const auto& [r, first] : p.at)
      for (int64_t j = 0; j < b.response_length(r); ++j)
        out[size_t(b.response_offsets[size_t(r)] + j)] = lp[size_t(first + j)];
  }
  return out;
}

}  // namespace dapo::test
