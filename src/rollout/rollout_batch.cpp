// RolloutBatch: accessors, appends, invariants and the byte form that moves
// a batch between ranks.
#include "dapo/rollout/rollout_batch.h"

#include <cstring>

#include "dapo/core/error.h"

namespace dapo::rollout {
namespace {

constexpr uint64_t kMagic = 0x3162746c6f726164ull;  // "darolbt1", little-endian
constexpr uint64_t kVersion = 1;

template <class T>
void put(std::vector<std::byte>& out, const T* data, size_t count) {
  const size_t at = out.size();
  out.resize(at + count * sizeof(T));
  if (count) std::memcpy(out.data() + at, data, count * sizeof(T));
}

template <class T>
void put_array(std::vector<std::byte>& out, const std::vector<T>& v) {
  const uint64_t n = v.size();
  put(out, &n, 1);
  put(out, v.data(), v.size());
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <class T>
  void get(T* data, size_t count) {
    DAPO_CHECK(count <= (bytes_.size() - at_) / sizeof(T), "RolloutBatch::from_bytes: truncated input (",
               bytes_.size(), " bytes)");
    if (count) std::memcpy(data, bytes_.data() + at_, count * sizeof(T));
    at_ += count * sizeof(T);
  }
  template <class T>
  void get_array(std::vector<T>& v) {
    uint64_t n = 0;
    get(&n, 1);
    DAPO_CHECK(n <= (bytes_.size() - at_) / sizeof(T), "RolloutBatch::from_bytes: an array of ", n,
               " elements does not fit the input");
    v.resize(size_t(n));
    get(v.data(), v.size());
  }
  bool at_end() const { return at_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::eos: return "eos";
    case FinishReason::length: return "length";
  }
  return "?";
}

std::span<const int32_t> RolloutBatch::prompt(int64_t p) const {
  return std::span<const int32_t>(prompt_tokens).subspan(size_t(prompt_offsets[size_t(p)]), size_t(prompt_length(p)));
}

std::span<const int32_t> RolloutBatch::response(int64_t r) const {
  return std::span<const int32_t>(response_tokens)
      .subspan(size_t(response_offsets[size_t(r)]), size_t(response_length(r)));
}

std::span<const float> RolloutBatch::logprobs(int64_t r) const {
  return std::span<const float>(sampling_logprobs)
      .subspan(size_t(response_offsets[size_t(r)]), size_t(response_length(r)));
}

int64_t RolloutBatch::add_prompt(uint64_t uid, std::span<const int32_t> ids) {
  prompt_uid.push_back(uid);
  prompt_tokens.insert(prompt_tokens.end(), ids.begin(), ids.end());
  prompt_offsets.push_back(int64_t(prompt_tokens.size()));
  return num_prompts() - 1;
}

void RolloutBatch::add_response(int64_t prompt, int64_t sample, std::span<const int32_t> tokens,
                                std::span<const float> logprobs, FinishReason finish) {
  DAPO_CHECK(prompt >= 0 && prompt < num_prompts(), "response of prompt ", prompt, " in a batch of ", num_prompts(),
             " prompts");
  DAPO_CHECK(tokens.size() == logprobs.size(), tokens.size(), " tokens with ", logprobs.size(), " log-probs");
  response_prompt.push_back(prompt);
  sample_index.push_back(sample);
  response_tokens.insert(response_tokens.end(), tokens.begin(), tokens.end());
  sampling_logprobs.insert(sampling_logprobs.end(), logprobs.begin(), logprobs.end());
  response_offsets.push_back(int64_t(response_tokens.size()));
  finish_reason.push_back(finish);
}

void RolloutBatch::append(const RolloutBatch& other) {
  const int64_t shift = num_prompts();
  for (int64_t p = 0; p < other.num_prompts(); ++p) add_prompt(other.prompt_uid[size_t(p)], other.prompt(p));
  for (int64_t r = 0; r < other.num_responses(); ++r)
    add_response(other.response_prompt[size_t(r)] + shift, other.sample_index[size_t(r)], other.response(r),
                 other.logprobs(r), other.finish_reason[size_t(r)]);
}

void RolloutBatch::check() const {
  const size_t P = prompt_uid.size(), R = response_prompt.size();
  DAPO_CHECK(prompt_offsets.size() == P + 1 && prompt_offsets.front() == 0 &&
                 prompt_offsets.back() == int64_t(prompt_tokens.size()),
             "RolloutBatch: prompt_offsets do not describe ", P, " prompts of ", prompt_tokens.size(), " tokens");
  for (size_t p = 0; p < P; ++p)
    DAPO_CHECK(prompt_offsets[p] <= prompt_offsets[p + 1], "RolloutBatch: prompt_offsets decrease at ", p);
  DAPO_CHECK(sample_index.size() == R && finish_reason.size() == R && response_offsets.size() == R + 1 &&
                 response_offsets.front() == 0 && response_offsets.back() == int64_t(response_tokens.size()) &&
                 sampling_logprobs.size() == response_tokens.size(),
             "RolloutBatch: response arrays do not describe ", R, " responses of ", response_tokens.size(), " tokens");
  for (size_t r = 0; r < R; ++r) {
    DAPO_CHECK(response_offsets[r] <= response_offsets[r + 1], "RolloutBatch: response_offsets decrease at ", r);
    DAPO_CHECK(response_prompt[r] >= 0 && response_prompt[r] < int64_t(P), "RolloutBatch: response ", r,
               " names prompt ", response_prompt[r], " of ", P);
    DAPO_CHECK(finish_reason[r] == FinishReason::eos || finish_reason[r] == FinishReason::length,
               "RolloutBatch: response ", r, " has finish reason ", int(finish_reason[r]));
  }
}

std::vector<std::byte> RolloutBatch::to_bytes() const {
  check();
  std::vector<std::byte> out;
  put(out, &kMagic, 1);
  put(out, &kVersion, 1);
  put_array(out, prompt_uid);
  put_array(out, prompt_offsets);
  put_array(out, prompt_tokens);
  put_array(out, response_prompt);
  put_array(out, sample_index);
  put_array(out, response_offsets);
  put_array(out, response_tokens);
  put_array(out, sampling_logprobs);
  put_array(out, finish_reason);
  return out;
}

RolloutBatch RolloutBatch::from_bytes(std::span<const std::byte> bytes) {
  Reader in(bytes);
  uint64_t magic = 0, version = 0;
  in.get(&magic, 1);
  DAPO_CHECK(magic == kMagic, "RolloutBatch::from_bytes: not a rollout batch (magic ", magic, ")");
  in.get(&version, 1);
  DAPO_CHECK(version == kVersion, "RolloutBatch::from_bytes: version ", version, ", expected ", kVersion);
  RolloutBatch b;
  in.get_array(b.prompt_uid);
  in.get_array(b.prompt_offsets);
  in.get_array(b.prompt_tokens);
  in.get_array(b.response_prompt);
  in.get_array(b.sample_index);
  in.get_array(b.response_offsets);
  in.get_array(b.response_tokens);
  in.get_array(b.sampling_logprobs);
  in.get_array(b.finish_reason);
  DAPO_CHECK(in.at_end(), "RolloutBatch::from_bytes: trailing bytes");
  b.check();
  return b;
}

}  // namespace dapo::rollout
