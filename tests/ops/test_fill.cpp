// Fill: every dtype and shape, the conversion of the value (f32 rounding,
// bf16 ties to even, -0, whole numbers for the integer dtypes, the i64 range
// beyond double's 2^53 spacing), zero through memset, an empty tensor, and
// the failures for values an integer dtype cannot hold.
#include "dapo/ops/fill.h"

#include <cstring>
#include <limits>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Fill, F32AnyShape) {
  std::vector<float> v(2 * 3 * 5, 7.0f);
  ops::fill(test::cpu_ctx(), tensor_f32(v.data(), {2, 3, 5}), 0.1);
  for (float x : v) ASSERT_EQ(x, 0.1f);  // the double rounded once, to nearest
  ops::fill(test::cpu_ctx(), tensor_f32(v.data(), {30}), 0.0);
  for (float x : v) ASSERT_EQ(bits_of(x), 0u);
  ops::fill(test::cpu_ctx(), tensor_f32(v.data(), {30}), -0.0);
  for (float x : v) ASSERT_EQ(bits_of(x), 0x80000000u);
  ops::fill(test::cpu_ctx(), tensor_f32(v.data(), {30}), -std::numeric_limits<double>::infinity());
  for (float x : v) ASSERT_EQ(x, -std::numeric_limits<float>::infinity());
}

TEST(Fill, Bf16RoundsLikeCast) {
  std::vector<bf16> v(17, bf16{0x1234});
  ops::fill(test::cpu_ctx(), tensor_bf16(v.data(), {17}), 1.0 + 1.0 / 256);  // a tie: down to the even 1.0
  for (bf16 x : v) ASSERT_EQ(x.bits, 0x3f80);
  ops::fill(test::cpu_ctx(), tensor_bf16(v.data(), {17}), -3.0);
  for (bf16 x : v) ASSERT_EQ(x.bits, 0xc040);
  ops::fill(test::cpu_ctx(), tensor_bf16(v.data(), {17}), 0.1);
  for (bf16 x : v) ASSERT_EQ(x.bits, to_bf16(0.1f).bits);
}

TEST(Fill, IntegerDtypes) {
  std::vector<int32_t> a(9, 5);
  ops::fill(test::cpu_ctx(), tensor_i32(a.data(), {3, 3}), -1.0);
  for (int32_t x : a) ASSERT_EQ(x, -1);
  ops::fill(test::cpu_ctx(), tensor_i32(a.data(), {9}), 2147483647.0);
  for (int32_t x : a) ASSERT_EQ(x, 2147483647);
  ops::fill(test::cpu_ctx(), tensor_i32(a.data(), {9}), 0.0);
  for (int32_t x : a) ASSERT_EQ(x, 0);
  std::vector<int64_t> b(5, 3);
  const double big = 9007199254740992.0 * 4;  // 2^55: whole, far past 2^32
  ops::fill(test::cpu_ctx(), tensor_i64(b.data(), {5}), big);
  for (int64_t x : b) ASSERT_EQ(x, int64_t(1) << 55);
  ops::fill(test::cpu_ctx(), tensor_i64(b.data(), {5}), -9223372036854775808.0);
  for (int64_t x : b) ASSERT_EQ(x, std::numeric_limits<int64_t>::min());
}

TEST(Fill, EmptyTensorIsANoOp) {
  float dummy = 3.0f;
  ops::fill(test::cpu_ctx(), tensor_f32(&dummy, {0, 4}), 1.0);
  EXPECT_EQ(dummy, 3.0f);
}

TEST(FillDeathTest, IntegerDtypesNeedAWholeNumberInRange) {
  std::vector<int32_t> a(4);
  std::vector<int64_t> b(4);
  EXPECT_DEATH(ops::fill(test::cpu_ctx(), tensor_i32(a.data(), {4}), 0.5), "not an i32 value");
  EXPECT_DEATH(ops::fill(test::cpu_ctx(), tensor_i32(a.data(), {4}), 2147483648.0), "not an i32 value");
  EXPECT_DEATH(ops::fill(test::cpu_ctx(), tensor_i32(a.data(), {4}), std::nan("")), "not an i32 value");
  EXPECT_DEATH(ops::fill(test::cpu_ctx(), tensor_i64(b.data(), {4}), 9223372036854775808.0), "not an i64 value");
}

}  // namespace
}  // namespace dapo
