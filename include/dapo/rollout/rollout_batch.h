// The rollout batch: what generation produces and what every later phase of
// a DAPO step reads (docs/DESIGN.md 3b, "One rollout batch type"). Ragged token
// arrays are flat data + offsets, per-prompt and per-response values are
// plain arrays, so the batch moves between ranks as one byte string
// (balancing, gathering to rank 0) and goes to the HDF5 dump as is, with no
// conversion to anything else and back.
//
// Generation fills the fields below; the trainer adds the per-response
// values of its own phases (score, reward, advantage, ...) beside them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dapo::rollout {

enum class FinishReason : uint8_t {
  eos = 0,     // sampled an EOS id (which ends the response and is part of it)
  length = 1,  // reached rollout.max_response_length
};
const char* finish_reason_name(FinishReason r);  // "eos", "length"

struct RolloutBatch {
  // ---- prompts (P) ----
  std::vector<uint64_t> prompt_uid;        // (P) data::prompt_uid of each prompt: the sampler's key
  std::vector<int64_t> prompt_offsets{0};  // (P+1) prompt p is prompt_tokens[offsets[p] .. offsets[p+1])
  std::vector<int32_t> prompt_tokens;      // token ids of all prompts, concatenated

  // ---- responses (R) ----
  std::vector<int64_t> response_prompt;      // (R) index of the response's prompt in the arrays above
  std::vector<int64_t> sample_index;         // (R) 0..n-1 within its prompt's group
  std::vector<int64_t> response_offsets{0};  // (R+1) into response_tokens and sampling_logprobs
  std::vector<int32_t> response_tokens;      // token ids of all responses, concatenated (an EOS included)
  // Per response token, the log-probability the sampler drew it with, under
  // the full softmax(logits / temperature) (ops/sampling.h; temperature 1
  // for greedy): what the trainer's recomputed old log-probs should match.
  std::vector<float> sampling_logprobs;
  std::vector<FinishReason> finish_reason;   // (R)

  int64_t num_prompts() const { return int64_t(prompt_uid.size()); }
  int64_t num_responses() const { return int64_t(response_prompt.size()); }
  int64_t prompt_length(int64_t p) const { return prompt_offsets[size_t(p + 1)] - prompt_offsets[size_t(p)]; }
  int64_t response_length(int64_t r) const {
    return response_offsets[size_t(r + 1)] - response_offsets[size_t(r)];
  }
  std::span<const int32_t> prompt(int64_t p) const;
  std::span<const int32_t> response(int64_t r) const;
  std::span<const float> logprobs(int64_t r) const;
  int64_t total_response_tokens() const { return int64_t(response_tokens.size()); }

  // Appends a prompt; returns its index.
  int64_t add_prompt(uint64_t uid, std::span<const int32_t> ids);
  // Appends a response of prompt `prompt` (an index already added).
  void add_response(int64_t prompt, int64_t sample, std::span<const int32_t> tokens,
                    std::span<const float> logprobs, FinishReason finish);
  // Appends all of `other`: its prompts after ours, its responses after
  // ours with their prompt indices shifted.
  void append(const RolloutBatch& other);

  // Fails (DAPO_CHECK) unless every array has its size and every offset
  // and index is in range.
  void check() const;

  // A self-describing byte string (magic, version, sizes, then the arrays;
  // host byte order: ranks of one job share it) and its inverse. Bytes that
  // are not such a string are a bug (DAPO_CHECK): they only ever come from
  // another rank of the same job.
  std::vector<std::byte> to_bytes() const;
  static RolloutBatch from_bytes(std::span<const std::byte> bytes);
};

}  // namespace dapo::rollout
