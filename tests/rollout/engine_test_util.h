// Test helpers of the generation engine's tests on the tiny models: random
// prompts, and engine options by name.
#pragma once

#include <random>
#include <vector>

#include "dapo/rollout/engine.h"

namespace dapo::test {

// Prompts of the given lengths with ids drawn from [0, 64) (the tiny
// models' vocabulary); prompt i has uid uid_base + seed * 100 + i.
inline std::vector<rollout::PromptInput> prompts_of(const std::vector<int>& lengths, uint32_t seed,
                                                    uint64_t uid_base = 0x1000) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> id(0, 63);
  std::vector<rollout::PromptInput> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    rollout::PromptInput p;
    p.uid = uid_base + seed * 100 + i;
    for (int t = 0; t < lengths[i]; ++t) p.ids.push_back(id(gen));
    out.push_back(p);
  }
  return out;
}

// Engine options by name: positional braces would slide past a field added
// in between (kv_cache_memory_fraction once took the place of max_num_seqs).
inline rollout::EngineOptions engine_opts(int64_t block_size, size_t kv_cache_bytes, int64_t max_num_seqs,
                                          int64_t max_batch_tokens) {
  rollout::EngineOptions o;
  o.block_size = block_size;
  o.kv_cache_bytes = kv_cache_bytes;
  o.max_num_seqs = max_num_seqs;
  o.max_batch_tokens = max_batch_tokens;
  return o;
}

}  // namespace dapo::test
