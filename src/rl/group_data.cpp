// GroupData consistency checks and its wire encoding (group_data.h).
#include "dapo/rl/group_data.h"

#include "dapo/core/error.h"
#include "dapo/rl/byte_codec.h"

namespace dapo::rl {
namespace {

// Guards against decoding bytes of another kind (or an older layout).
constexpr uint32_t kGroupMagic = 0x50524744;  // "DGRP"
constexpr uint32_t kGroupVersion = 2;

template <class V>
void check_per_response(const V& v, int64_t n, const char* name, int64_t uid) {
  DAPO_CHECK(v.empty() || int64_t(v.size()) == n, "group uid ", uid, ": ", name, " has ", v.size(),
             " entries for ", n, " responses");
}

}  // namespace

std::span<const int32_t> GroupData::response(int64_t r) const {
  DAPO_CHECK(r >= 0 && r < num_responses(), "response ", r, " of ", num_responses());
  return std::span<const int32_t>(response_ids).subspan(size_t(response_offsets[size_t(r)]),
                                                         size_t(response_length(r)));
}

int64_t GroupData::packed_tokens() const {
  return num_responses() * int64_t(prompt_ids.size()) + int64_t(response_ids.size());
}

void GroupData::validate() const {
  DAPO_CHECK(!response_offsets.empty() && response_offsets.front() == 0, "group uid ", uid,
             ": response_offsets must start at 0");
  for (size_t r = 1; r < response_offsets.size(); ++r)
    DAPO_CHECK(response_offsets[r] >= response_offsets[r - 1], "group uid ", uid,
               ": response_offsets decrease at ", r);
  DAPO_CHECK(response_offsets.back() == int64_t(response_ids.size()), "group uid ", uid, ": offsets end at ",
             response_offsets.back(), ", response_ids has ", response_ids.size());
  DAPO_CHECK(old_logprobs.empty() || old_logprobs.size() == response_ids.size(), "group uid ", uid,
             ": old_logprobs has ", old_logprobs.size(), " entries for ", response_ids.size(), " tokens");
  DAPO_CHECK(sampling_logprobs.empty() || sampling_logprobs.size() == response_ids.size(), "group uid ", uid,
             ": sampling_logprobs has ", sampling_logprobs.size(), " entries for ", response_ids.size(), " tokens");
  const int64_t n = num_responses();
  check_per_response(finish_reason, n, "finish_reason", uid);
  check_per_response(score, n, "score", uid);
  check_per_response(acc, n, "acc", uid);
  check_per_response(reward, n, "reward", uid);
  check_per_response(in_loss, n, "in_loss", uid);
  check_per_response(advantage, n, "advantage", uid);
  check_per_response(response_text, n, "response_text", uid);
  check_per_response(pred, n, "pred", uid);
}

std::vector<std::byte> serialize_group(const GroupData& g) {
  g.validate();
  ByteWriter w;
  w.put(kGroupMagic);
  w.put(kGroupVersion);
  w.put(g.uid);
  w.put(g.round);
  w.put(g.position);
  w.put_string(g.data_source);
  w.put_string(g.ground_truth);
  w.put_string(g.prompt_text);
  w.put_array(g.prompt_ids);
  w.put_array(g.response_offsets);
  w.put_array(g.response_ids);
  w.put_array(g.old_logprobs);
  w.put_array(g.sampling_logprobs);
  w.put_array(g.finish_reason);
  w.put_array(g.score);
  w.put_array(g.acc);
  w.put_array(g.reward);
  w.put_array(g.in_loss);
  w.put_array(g.advantage);
  w.put_strings(g.response_text);
  w.put_strings(g.pred);
  return w.take();
}

GroupData deserialize_group(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "serialised rollout group");
  const auto magic = r.get<uint32_t>();
  const auto version = r.get<uint32_t>();
  DAPO_CHECK(magic == kGroupMagic && version == kGroupVersion, "not a serialised rollout group (magic ", magic,
             ", version ", version, ")");
  GroupData g;
  g.uid = r.get<int64_t>();
  g.round = r.get<int64_t>();
  g.position = r.get<int64_t>();
  g.data_source = r.get_string();
  g.ground_truth = r.get_string();
  g.prompt_text = r.get_string();
  g.prompt_ids = r.get_array<int32_t>();
  g.response_offsets = r.get_array<int64_t>();
  g.response_ids = r.get_array<int32_t>();
  g.old_logprobs = r.get_array<float>();
  g.sampling_logprobs = r.get_array<float>();
  g.finish_reason = r.get_array<uint8_t>();
  g.score = r.get_array<double>();
  g.acc = r.get_array<double>();
  g.reward = r.get_array<double>();
  g.in_loss = r.get_array<uint8_t>();
  g.advantage = r.get_array<double>();
  g.response_text = r.get_strings();
  g.pred = r.get_strings();
  r.expect_end();
  g.validate();
  return g;
}

}  // namespace dapo::rl
