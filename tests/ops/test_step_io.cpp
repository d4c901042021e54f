// Step I/O on the CPU backend: the metadata's copy with the fed tokens laid
// over it, the samples' copy back, and bad arguments rejected by the checks
// both backends share.
#include "dapo/ops/step_io.h"

#include <numeric>
#include <vector>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

Tensor words(std::vector<int32_t>& v, int64_t offset = 0, int64_t n = -1) {
  return Tensor(v.data() + offset, DType::i32, {n < 0 ? int64_t(v.size()) - offset : n});
}

TEST(StepIo, CopiesInWithTheFedTokensAndOut) {
  std::vector<int32_t> host(40), dev(40, -1), fed(8), back(40, 0);
  std::iota(host.begin(), host.end(), 1);
  std::iota(fed.begin(), fed.end(), 900);
  // tokens: words [4, 12) of the mirror; the first 5 come from fed.
  ops::step_in(test::cpu_ctx(), {words(host), words(dev), words(dev, 4, 8), words(fed), 5, 40});
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(dev[size_t(i)], i >= 4 && i < 9 ? 900 + (i - 4) : i + 1) << i;
  ops::step_out(test::cpu_ctx(), {words(back), words(dev), 40});
  EXPECT_EQ(back, dev);
}

TEST(StepIoDeathTest, BadArgumentsAreRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int32_t> host(40), dev(40), fed(8), other(40);
  const auto ctx = test::cpu_ctx();
  EXPECT_DEATH(ops::step_in(ctx, {words(host), words(dev, 0, 36), words(dev, 4, 8), words(fed), 5, 40}),
               "host words into a device mirror");
  EXPECT_DEATH(ops::step_in(ctx, {words(host), words(dev), words(dev, 4, 8), words(fed), 5, 39}), "capacity");
  EXPECT_DEATH(ops::step_in(ctx, {words(host), words(dev), words(other, 4, 8), words(fed), 5, 40}),
               "inside the device mirror");
  EXPECT_DEATH(ops::step_in(ctx, {words(host), words(dev), words(dev, 4, 8), words(fed), 9, 40}), "fed_count");
  EXPECT_DEATH(ops::step_in(ctx, {words(host), words(dev), words(dev, 4, 8), words(fed, 0, 4), 5, 40}),
               "at least 5");
  EXPECT_DEATH(ops::step_out(ctx, {words(host, 0, 20), words(dev), 40}), "host words");
}

}  // namespace
}  // namespace dapo
