// Packing training sequences into micro-batches under a token budget
// (docs/DESIGN.md section 3b, "packed micro-batches"): the sequences of one
// rank's share of a (mini-)batch are concatenated without padding, with
// cumulative offsets, next-token targets, a per-position loss mask and any
// number of per-position float channels (the DAPO update's advantages, old
// and reference log-probs; SFT needs none).
//
// Positions follow rl/response_tokens.h: position t of a sequence scores
// tokens[t+1] (targets[t] = tokens[t+1]); the last position has no next
// token, so its target is a placeholder (the sequence's own last id, a valid
// id) and its mask must be 0.
//
// Packing is next-fit in input order: a micro-batch takes the following
// sequences while their total length stays within the budget, and a
// sequence is never split. So the result is a pure function of the lengths
// and the budget, the same on every rank and every run.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "dapo/model/activations.h"

namespace dapo::trainer {

// Sequences to pack, flat: sequence i is positions [offsets[i], offsets[i+1]).
// Owns its arrays (host memory).
struct SequenceSet {
  std::vector<int32_t> tokens;             // token ids, every sequence concatenated
  std::vector<int64_t> offsets{0};         // (N+1) cumulative lengths
  std::vector<uint8_t> mask;               // 0/1 per position: the position's target is in the loss
  std::vector<std::vector<float>> values;  // (K) channels, each one value per position

  explicit SequenceSet(int64_t channels = 0) : values(size_t(channels)) {}

  int64_t size() const { return int64_t(offsets.size()) - 1; }
  int64_t length(int64_t i) const { return offsets[size_t(i) + 1] - offsets[size_t(i)]; }
  int64_t total_tokens() const { return offsets.back(); }
  int64_t channels() const { return int64_t(values.size()); }

  // Appends one sequence: `mask` and every entry of `channel_values` have
  // tokens.size() elements, one per channel of the set (DAPO_CHECK).
  // tokens non-empty; mask of the last position must be 0.
  void add(std::span<const int32_t> tokens, std::span<const uint8_t> mask,
           std::initializer_list<std::span<const float>> channel_values = {});
};

// One packed micro-batch on the host. model_batch() views it for
// Qwen2Model::forward_train; keep the MicroBatch alive (and unmoved) until
// the backward is done.
struct MicroBatch {
  std::vector<int32_t> tokens, positions, cu_seqlens, targets;  // (T), (T), (B+1), (T)
  std::vector<uint8_t> mask;                                    // (T)
  std::vector<std::vector<float>> values;                       // (K) of (T)
  std::vector<int64_t> sequences;  // (B) the index in the SequenceSet of each packed sequence

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_sequences() const { return int64_t(cu_seqlens.size()) - 1; }
  int64_t max_sequence_length() const;
  int64_t mask_tokens() const;
  // Views of the arrays (the model only reads them).
  model::PackedBatch model_batch() const;
};

// Which sequences each micro-batch takes: consecutive runs of indices,
// next-fit under `max_tokens` (> 0). A sequence longer than max_tokens
// cannot be packed: UserError naming train.max_token_len_per_gpu.
std::vector<std::vector<int64_t>> plan_micro_batches(std::span<const int64_t> lengths, int64_t max_tokens);

// Packs every sequence of `set` (in order) into micro-batches of at most
// `max_tokens` tokens. An empty set gives no micro-batch. UserError as
// plan_micro_batches.
std::vector<MicroBatch> pack_micro_batches(const SequenceSet& set, int64_t max_tokens);

}  // namespace dapo::trainer
