// Next-fit packing of whole sequences into micro-batches (packing.h).
#include "dapo/trainer/packing.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::trainer {

void SequenceSet::add(std::span<const int32_t> seq, std::span<const uint8_t> seq_mask,
                      std::initializer_list<std::span<const float>> channel_values) {
  DAPO_CHECK(!seq.empty(), "an empty sequence cannot be trained on");
  DAPO_CHECK(seq_mask.size() == seq.size(), "mask of ", seq_mask.size(), " for ", seq.size(), " tokens");
  DAPO_CHECK(seq_mask.back() == 0, "the last position of a sequence has no target and must be masked out");
  DAPO_CHECK(channel_values.size() == values.size(), channel_values.size(), " channels given, the set has ",
             values.size());
  tokens.insert(tokens.end(), seq.begin(), seq.end());
  mask.insert(mask.end(), seq_mask.begin(), seq_mask.end());
  size_t k = 0;
  for (const std::span<const float> v : channel_values) {
    DAPO_CHECK(v.size() == seq.size(), "channel ", k, " has ", v.size(), " values for ", seq.size(), " tokens");
    values[k].insert(values[k].end(), v.begin(), v.end());
    ++k;
  }
  offsets.push_back(int64_t(tokens.size()));
}

int64_t MicroBatch::max_sequence_length() const {
  int64_t m = 0;
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b) m = std::max<int64_t>(m, cu_seqlens[b + 1] - cu_seqlens[b]);
  return m;
}

int64_t MicroBatch::mask_tokens() const { return std::count(mask.begin(), mask.end(), uint8_t(1)); }

model::PackedBatch MicroBatch::model_batch() const {
  // Tensor views hold a non-const pointer; the model only reads batches.
  const auto i32 = [](const std::vector<int32_t>& v) {
    return tensor_i32(const_cast<int32_t*>(v.data()), {int64_t(v.size())});
  };
  return {i32(tokens), i32(positions), i32(cu_seqlens), i32(targets)};
}

std::vector<std::vector<int64_t>> plan_micro_batches(std::span<const int64_t> lengths, int64_t max_tokens) {
  DAPO_CHECK(max_tokens > 0, "token budget ", max_tokens);
  std::vector<std::vector<int64_t>> plan;
  int64_t used = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t n = lengths[i];
    DAPO_CHECK(n > 0, "sequence ", i, " has length ", n);
    if (n > max_tokens)
      throw UserError(cat("a sequence of ", n, " tokens (prompt + response) does not fit in a micro-batch of "
                          "train.max_token_len_per_gpu = ", max_tokens, " tokens; raise it (sequences are never split)"));
    if (plan.empty() || used + n > max_tokens) {
      plan.emplace_back();
      used = 0;
    }
    plan.back().push_back(int64_t(i));
    used += n;
  }
  return plan;
}

std::vector<MicroBatch> pack_micro_batches(const SequenceSet& set, int64_t max_tokens) {
  std::vector<int64_t> lengths(size_t(set.size()));
  for (int64_t i = 0; i < set.size(); ++i) lengths[size_t(i)] = set.length(i);
  const std::vector<std::vector<int64_t>> plan = plan_micro_batches(lengths, max_tokens);
  std::vector<MicroBatch> out(plan.size());
  for (size_t m = 0; m < plan.size(); ++m) {
    MicroBatch& mb = out[m];
    mb.values.resize(set.values.size());
    mb.cu_seqlens.push_back(0);
    for (const int64_t i : plan[m]) {
      const size_t begin = size_t(set.offsets[size_t(i)]), end = size_t(set.offsets[size_t(i) + 1]);
      for (size_t t = begin; t < end; ++t) {
        mb.tokens.push_back(set.tokens[t]);
        mb.positions.push_back(int32_t(t - begin));
        // The last position has no next token: its own id is a valid placeholder (mask 0).
        mb.targets.push_back(t + 1 < end ? set.tokens[t + 1] : set.tokens[t]);
      }
      mb.mask.insert(mb.mask.end(), set.mask.begin() + long(begin), set.mask.begin() + long(end));
      for (size_t k = 0; k < set.values.size(); ++k)
        mb.values[k].insert(mb.values[k].end(), set.values[k].begin() + long(begin), set.values[k].begin() + long(end));
      mb.cu_seqlens.push_back(int32_t(mb.tokens.size()));
      mb.sequences.push_back(i);
    }
  }
  return out;
}

}  // namespace dapo::trainer
