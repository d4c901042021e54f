// Response token positions in packed sequences (response_tokens.h).
#include "dapo/rl/response_tokens.h"

#include <algorithm>

#include "dapo/core/error.h"

namespace dapo::rl {
namespace {

template <class T>
void check_length(int64_t prompt_len, int64_t response_len, std::span<T> seq) {
  DAPO_CHECK(int64_t(seq.size()) == prompt_len + response_len, "sequence array of ", seq.size(),
             " entries for prompt ", prompt_len, " + response ", response_len);
}

}  // namespace

TokenRange response_positions(int64_t prompt_len, int64_t response_len) {
  DAPO_CHECK(prompt_len >= 1, "a packed sequence needs at least one prompt token, got ", prompt_len);
  DAPO_CHECK(response_len >= 0, "response length ", response_len);
  return {prompt_len - 1, prompt_len - 1 + response_len};
}

void fill_response_mask(int64_t prompt_len, int64_t response_len, bool in_loss, std::span<uint8_t> seq_mask) {
  const TokenRange r = response_positions(prompt_len, response_len);
  check_length(prompt_len, response_len, seq_mask);
  std::fill(seq_mask.begin(), seq_mask.end(), uint8_t(0));
  if (in_loss) std::fill(seq_mask.begin() + r.begin, seq_mask.begin() + r.end, uint8_t(1));
}

void fill_response_values(int64_t prompt_len, int64_t response_len, float value, std::span<float> seq_values) {
  const TokenRange r = response_positions(prompt_len, response_len);
  check_length(prompt_len, response_len, seq_values);
  std::fill(seq_values.begin(), seq_values.end(), 0.0f);
  std::fill(seq_values.begin() + r.begin, seq_values.begin() + r.end, value);
}

void scatter_response_values(int64_t prompt_len, std::span<const float> per_token, std::span<float> seq_values) {
  const int64_t response_len = int64_t(per_token.size());
  const TokenRange r = response_positions(prompt_len, response_len);
  check_length(prompt_len, response_len, seq_values);
  std::fill(seq_values.begin(), seq_values.end(), 0.0f);
  std::copy(per_token.begin(), per_token.end(), seq_values.begin() + r.begin);
}

}  // namespace dapo::rl
