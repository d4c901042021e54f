// The slow, obviously correct generation loop the engine is measured and
// tested against: each response on its own, and for every token the full
// forward (forward_logits) of the whole sequence so far - no KV cache, no
// batching, no sharing - then the same sampling op with the same keys as
// the engine (engine.h: seed, sample_stream(step, uid, sample), counter =
// the token's position in the response). Quadratic in the length: for
// tests and benchmarks only.
#pragma once

#include <span>

#include "dapo/model/qwen2_model.h"
#include "dapo/ops/context.h"
#include "dapo/rollout/engine.h"
#include "dapo/rollout/rollout_batch.h"

namespace dapo::rollout {

// n responses per prompt, ordered by prompt then sample index, as
// GenerationEngine::generate returns them. Collective over the model's tp
// Comm. ctx's scratch is replaced by an arena of its own.
RolloutBatch reference_generate(const model::Qwen2Model& model, const ops::Ctx& ctx,
                                std::span<const PromptInput> prompts, const SamplingOptions& sampling);

}  // namespace dapo::rollout
