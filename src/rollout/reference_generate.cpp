// reference_generate: the full forward of the whole sequence for every
// token, one response at a time.
#include "dapo/rollout/reference_generate.h"

#include <omp.h>

#include <algorithm>

#include "dapo/core/arena.h"
#include "dapo/core/error.h"
#include "dapo/ops/sampling.h"

namespace dapo::rollout {

RolloutBatch reference_generate(const model::Qwen2Model& model, const ops::Ctx& ctx,
                                std::span<const PromptInput> prompts, const SamplingOptions& sampling) {
  const int64_t V = model.dims().V;
  int64_t longest = 1;
  for (const PromptInput& p : prompts) longest = std::max<int64_t>(longest, int64_t(p.ids.size()));
  const int64_t T_max = longest + sampling.max_response_length;
  const Device device = ops::backend_device(ctx.backend);
  const int threads = omp_get_max_threads();
  Arena act(model.inference_activation_bytes(T_max), device, "reference-activations");
  Arena scratch(std::max(model.scratch_bytes(T_max, T_max, T_max, threads), size_t(threads) * 8 * size_t(V)) +
                    2 * Arena::kAlign,
                device, "reference-scratch");
  ops::Ctx c = ctx;
  c.scratch = &scratch;
  std::vector<float> logits(size_t(T_max * V));
  std::vector<int32_t> seq, positions, targets;
  const ops::SamplingParams params{sampling.seed, float(sampling.temperature), float(sampling.top_p),
                                   int(std::clamp<int64_t>(sampling.top_k, 0, INT32_MAX))};

  RolloutBatch batch;
  for (const PromptInput& p : prompts) batch.add_prompt(p.uid, p.ids);
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    const PromptInput& prompt = prompts[pi];
    DAPO_CHECK(!prompt.ids.empty(), "reference_generate: empty prompt (uid ", prompt.uid, ")");
    for (int64_t k = 0; k < sampling.n; ++k) {
      seq = prompt.ids;
      std::vector<int32_t> response;
      std::vector<float> logprobs;
      FinishReason finish = FinishReason::length;
      for (int64_t t = 0; t < sampling.max_response_length; ++t) {
        const int64_t T = int64_t(seq.size());
        positions.resize(size_t(T));
        for (int64_t i = 0; i < T; ++i) positions[size_t(i)] = int32_t(i);
        targets.assign(size_t(T), 0);
        int32_t cu[2] = {0, int32_t(T)};
        const model::PackedBatch packed{tensor_i32(seq.data(), {T}), tensor_i32(positions.data(), {T}),
                                        tensor_i32(cu, {2}), tensor_i32(targets.data(), {T})};
        model.forward_logits(c, act, packed, tensor_f32(logits.data(), {T, V}));
        int32_t token = 0;
        float logprob = 0;
        int64_t stream = int64_t(sample_stream(sampling.step, prompt.uid, k)), counter = t;
        ops::sample_tokens(c, tensor_i32(&token, {1}), tensor_f32(&logprob, {1}),
                           tensor_f32(logits.data() + (T - 1) * V, {1, V}), Tensor{}, tensor_i64(&stream, {1}),
                           tensor_i64(&counter, {1}), params);
        response.push_back(token);
        logprobs.push_back(logprob);
        seq.push_back(token);
        if (std::find(sampling.eos_ids.begin(), sampling.eos_ids.end(), token) != sampling.eos_ids.end()) {
          finish = FinishReason::eos;
          break;
        }
      }
      batch.add_response(int64_t(pi), k, response, logprobs, finish);
    }
  }
  return batch;
}

}  // namespace dapo::rollout
