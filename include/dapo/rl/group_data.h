// GroupData: everything the update phase needs about one prompt and its n
// responses (one GRPO group), as ragged token arrays (flat + offsets) and
// per-response scalars, and its byte serialisation for the balancing
// exchange between dp ranks (balance.h). A group never splits: it is the
// unit of dynamic sampling, balancing and advantage computation.
//
// Layout (n = number of responses):
//   response_offsets (n+1): response r's tokens are
//       response_ids[response_offsets[r] .. response_offsets[r+1]),
//   old_logprobs, sampling_logprobs: empty, or aligned with response_ids
//       (one per token),
//   per-response vectors (finish_reason, score, acc, reward, in_loss,
//       advantage, response_text, pred): empty or of length n.
// Optional fields (empty vectors/strings) round-trip as empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dapo::rl {

struct GroupData {
  int64_t uid = 0;        // prompt uid (the dataset's)
  int64_t round = 0;      // generation round (dynamic sampling) that produced it
  int64_t position = 0;   // the prompt's place in its round's generation batch (selection order)
  std::string data_source;
  std::string ground_truth;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;

  std::vector<int64_t> response_offsets{0};  // (n+1), starts at 0, non-decreasing
  std::vector<int32_t> response_ids;         // flat response tokens
  std::vector<float> old_logprobs;           // flat, empty or one per response token
  // flat, empty or one per response token: the rollout engine's log-prob of
  // each sampled token (the sampler's, against the trainer's old_logprobs)
  std::vector<float> sampling_logprobs;
  std::vector<uint8_t> finish_reason;        // (n) the rollout engine's code (e.g. eos / length)
  std::vector<double> score;                 // (n) verifier score (+1 / -1)
  std::vector<double> acc;                   // (n) 1 correct, 0 wrong
  std::vector<double> reward;                // (n) score + overlong penalty
  std::vector<uint8_t> in_loss;              // (n) 0: masked out (overlong filtering)
  std::vector<double> advantage;             // (n) GRPO advantage
  std::vector<std::string> response_text;    // (n) decoded responses
  std::vector<std::string> pred;             // (n) extracted answers

  int64_t num_responses() const { return int64_t(response_offsets.size()) - 1; }
  int64_t response_length(int64_t r) const { return response_offsets[size_t(r) + 1] - response_offsets[size_t(r)]; }
  std::span<const int32_t> response(int64_t r) const;
  // Tokens of the packed sequences of this group: sum over responses of
  // (prompt length + response length); what balancing weighs.
  int64_t packed_tokens() const;
  // Fails (DAPO_CHECK) on inconsistent offsets or vector lengths.
  void validate() const;

  bool operator==(const GroupData&) const = default;
};

// Bytes of one group (validated first); deserialize_group(serialize_group(g)) == g.
std::vector<std::byte> serialize_group(const GroupData& group);
GroupData deserialize_group(std::span<const std::byte> bytes);

}  // namespace dapo::rl
