// RolloutBatch: ragged accessors, append with shifted prompt indices, the
// byte form round trip (what moves between ranks), and the invariant checks.
#include "dapo/rollout/rollout_batch.h"

#include <gtest/gtest.h>

#include "dapo/core/error.h"

namespace dapo::rollout {
namespace {

RolloutBatch sample_batch(uint64_t uid0) {
  RolloutBatch b;
  b.add_prompt(uid0, std::vector<int32_t>{1, 2, 3});
  b.add_prompt(uid0 + 1, std::vector<int32_t>{4});
  b.add_response(0, 0, std::vector<int32_t>{7, 8}, std::vector<float>{-0.5f, -1.0f}, FinishReason::length);
  b.add_response(0, 1, std::vector<int32_t>{}, std::vector<float>{}, FinishReason::length);
  b.add_response(1, 0, std::vector<int32_t>{9, 10, 2}, std::vector<float>{-2, -3, -4}, FinishReason::eos);
  return b;
}

TEST(RolloutBatch, RaggedAccessors) {
  const RolloutBatch b = sample_batch(100);
  b.check();
  EXPECT_EQ(b.num_prompts(), 2);
  EXPECT_EQ(b.num_responses(), 3);
  EXPECT_EQ(b.prompt_length(0), 3);
  EXPECT_EQ(std::vector<int32_t>(b.prompt(1).begin(), b.prompt(1).end()), (std::vector<int32_t>{4}));
  EXPECT_EQ(b.response_length(1), 0);
  EXPECT_EQ(std::vector<int32_t>(b.response(2).begin(), b.response(2).end()), (std::vector<int32_t>{9, 10, 2}));
  EXPECT_EQ(std::vector<float>(b.logprobs(0).begin(), b.logprobs(0).end()), (std::vector<float>{-0.5f, -1.0f}));
  EXPECT_EQ(b.response_offsets, (std::vector<int64_t>{0, 2, 2, 5}));
  EXPECT_EQ(b.total_response_tokens(), 5);
  EXPECT_STREQ(finish_reason_name(FinishReason::eos), "eos");
  EXPECT_STREQ(finish_reason_name(FinishReason::length), "length");
}

TEST(RolloutBatch, AppendShiftsPromptIndices) {
  RolloutBatch a = sample_batch(100);
  a.append(sample_batch(200));
  a.check();
  EXPECT_EQ(a.num_prompts(), 4);
  EXPECT_EQ(a.prompt_uid, (std::vector<uint64_t>{100, 101, 200, 201}));
  EXPECT_EQ(a.response_prompt, (std::vector<int64_t>{0, 0, 1, 2, 2, 3}));
  EXPECT_EQ(std::vector<int32_t>(a.response(5).begin(), a.response(5).end()), (std::vector<int32_t>{9, 10, 2}));
  EXPECT_EQ(a.finish_reason[5], FinishReason::eos);
  RolloutBatch empty;
  empty.append(RolloutBatch{});
  empty.check();
  EXPECT_EQ(empty.num_prompts(), 0);
}

TEST(RolloutBatch, BytesRoundTrip) {
  const RolloutBatch b = sample_batch(1ull << 63);
  const std::vector<std::byte> bytes = b.to_bytes();
  const RolloutBatch c = RolloutBatch::from_bytes(bytes);
  EXPECT_EQ(c.prompt_uid, b.prompt_uid);
  EXPECT_EQ(c.prompt_offsets, b.prompt_offsets);
  EXPECT_EQ(c.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(c.response_prompt, b.response_prompt);
  EXPECT_EQ(c.sample_index, b.sample_index);
  EXPECT_EQ(c.response_offsets, b.response_offsets);
  EXPECT_EQ(c.response_tokens, b.response_tokens);
  EXPECT_EQ(c.sampling_logprobs, b.sampling_logprobs);
  EXPECT_EQ(c.finish_reason, b.finish_reason);
  const RolloutBatch e = RolloutBatch::from_bytes(RolloutBatch{}.to_bytes());
  EXPECT_EQ(e.num_prompts(), 0);
  EXPECT_EQ(e.prompt_offsets, (std::vector<int64_t>{0}));
}

TEST(RolloutBatchDeathTest, BrokenBatchesAreFatal) {
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);
    f();
  };
  EXPECT_DEATH(die([] {
                 RolloutBatch b = sample_batch(1);
                 b.response_prompt[1] = 5;
                 b.check();
               }),
               "response 1 names prompt 5 of 2");
  EXPECT_DEATH(die([] {
                 RolloutBatch b = sample_batch(1);
                 b.sampling_logprobs.pop_back();
                 b.check();
               }),
               "response arrays do not describe 3 responses");
  EXPECT_DEATH(die([] {
                 RolloutBatch b;
                 b.add_response(0, 0, std::vector<int32_t>{}, std::vector<float>{}, FinishReason::eos);
               }),
               "response of prompt 0 in a batch of 0 prompts");
  EXPECT_DEATH(die([] {
                 std::vector<std::byte> bytes = sample_batch(1).to_bytes();
                 bytes.resize(bytes.size() - 3);
                 RolloutBatch::from_bytes(bytes);
               }),
               "truncated input|does not fit the input");
  EXPECT_DEATH(die([] {
                 std::vector<std::byte> bytes(16, std::byte{1});
                 RolloutBatch::from_bytes(bytes);
               }),
               "not a rollout batch");
}

}  // namespace
}  // namespace dapo::rollout
