// GroupData serialisation: exact round trips (every field, empty optional
// fields, NaN payloads bit for bit), the byte codec's bounds checks, and
// inconsistent groups.
#include "dapo/rl/group_data.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "dapo/rl/byte_codec.h"

namespace dapo {
namespace {

using rl::GroupData;

GroupData sample_group() {
  GroupData g;
  g.uid = 1234567890123;
  g.round = 2;
  g.position = 17;
  g.data_source = "math_dapo";
  g.ground_truth = "42";
  g.prompt_text = "What is 6 * 7?\nAnswer: ";
  g.prompt_ids = {5, 6, 7, -1, 2147483647};
  g.response_offsets = {0, 3, 3, 7};
  g.response_ids = {10, 11, 12, 20, 21, 22, 23};
  g.old_logprobs = {-0.5f, -1.25f, -1e-30f, -3.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -7.0f};
  g.sampling_logprobs = {-0.5f, -1.5f, -2e-7f, -3.25f, -0.0f, -1e-9f, -6.5f};
  g.finish_reason = {0, 1, 0};
  g.score = {1, -1, -1};
  g.acc = {1, 0, 0};
  g.reward = {1, -1.5, -1};
  g.in_loss = {1, 0, 1};
  g.advantage = {1.1547, -0.5773, -0.5773};
  g.response_text = {"42", "", std::string("a\0b", 3)};
  g.pred = {"42", "[INVALID]", "43"};
  return g;
}

TEST(GroupData, RoundTripsExactly) {
  const GroupData g = sample_group();
  const auto bytes = rl::serialize_group(g);
  const GroupData back = rl::deserialize_group(bytes);
  EXPECT_EQ(back, g);
  EXPECT_EQ(back.response_text[2].size(), 3u);
  EXPECT_EQ(std::signbit(back.old_logprobs[4]), true);  // -0 stays -0
  EXPECT_EQ(rl::serialize_group(back), bytes);
  EXPECT_EQ(g.num_responses(), 3);
  EXPECT_EQ(g.response_length(1), 0);
  EXPECT_EQ(g.response(2).size(), 4u);
  EXPECT_EQ(g.response(2)[0], 20);
  EXPECT_EQ(g.packed_tokens(), 3 * 5 + 7);
}

TEST(GroupData, NanPayloadSurvivesBitForBit) {
  GroupData g = sample_group();
  const uint32_t payload = 0x7FC01234u;
  g.old_logprobs[1] = std::bit_cast<float>(payload);
  g.reward[0] = std::numeric_limits<double>::infinity();
  const GroupData back = rl::deserialize_group(rl::serialize_group(g));
  EXPECT_EQ(std::bit_cast<uint32_t>(back.old_logprobs[1]), payload);
  EXPECT_TRUE(std::isinf(back.reward[0]));
}

TEST(GroupData, EmptyOptionalFieldsAndNoResponses) {
  GroupData g;
  g.uid = 3;
  const GroupData back = rl::deserialize_group(rl::serialize_group(g));
  EXPECT_EQ(back, g);
  EXPECT_EQ(back.num_responses(), 0);
  EXPECT_EQ(back.packed_tokens(), 0);
}

TEST(ByteCodec, ScalarsArraysStrings) {
  rl::ByteWriter w;
  w.put<int32_t>(-7);
  w.put<double>(0.1);
  w.put_array(std::vector<int64_t>{1, -2, 3});
  w.put_array(std::vector<float>{});
  w.put_string("hello");
  w.put_strings({"a", "", "ccc"});
  const auto bytes = w.take();
  rl::ByteReader r(bytes, "test payload");
  EXPECT_EQ(r.get<int32_t>(), -7);
  EXPECT_EQ(r.get<double>(), 0.1);
  EXPECT_EQ(r.get_array<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_TRUE(r.get_array<float>().empty());
  EXPECT_EQ(r.get_string(), "hello");
  EXPECT_EQ(r.get_strings(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(r.remaining(), 0u);
  r.expect_end();
}

TEST(GroupDataDeathTest, CorruptBytesAndInconsistentGroups) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto bytes = rl::serialize_group(sample_group());
  const std::span<const std::byte> all(bytes);
  EXPECT_DEATH(rl::deserialize_group(all.first(bytes.size() - 1)), "serialised rollout group: .* bytes left");
  std::vector<std::byte> longer(bytes);
  longer.push_back(std::byte{0});
  EXPECT_DEATH(rl::deserialize_group(longer), "1 bytes left after the last field");
  std::vector<std::byte> wrong(bytes);
  wrong[0] = std::byte{0};
  EXPECT_DEATH(rl::deserialize_group(wrong), "not a serialised rollout group");
  EXPECT_DEATH(rl::deserialize_group(all.first(3)), "a scalar of 4 bytes with 3 bytes left");

  GroupData g = sample_group();
  g.score.pop_back();
  EXPECT_DEATH(rl::serialize_group(g), "score has 2 entries for 3 responses");
  g = sample_group();
  g.response_offsets = {1, 3, 3, 7};
  EXPECT_DEATH(g.validate(), "response_offsets must start at 0");
  g.response_offsets = {0, 4, 3, 7};
  EXPECT_DEATH(g.validate(), "response_offsets decrease at 2");
  g.response_offsets = {0, 3, 3, 6};
  EXPECT_DEATH(g.validate(), "offsets end at 6, response_ids has 7");
  g = sample_group();
  g.old_logprobs.resize(2);
  EXPECT_DEATH(g.validate(), "old_logprobs has 2 entries for 7 tokens");
  g = sample_group();
  g.sampling_logprobs.resize(8);
  EXPECT_DEATH(g.validate(), "sampling_logprobs has 8 entries for 7 tokens");
  EXPECT_DEATH(sample_group().response(3), "response 3 of 3");

  rl::ByteWriter w;
  w.put<int64_t>(1000);
  const auto b = w.take();
  rl::ByteReader r(b, "short array");
  EXPECT_DEATH(r.get_array<double>(), "short array: array of 1000 elements with 0 bytes left");
  rl::ByteReader r2(b, "strings");
  EXPECT_DEATH(r2.get_strings(), "strings: 1000 strings with 0 bytes left");
}

}  // namespace
}  // namespace dapo
