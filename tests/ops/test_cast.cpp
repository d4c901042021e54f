// Cast: exact bf16 bit patterns of f32 -> bf16 (ties to even, inf, NaN,
// -0, overflow near the bf16 maximum, subnormals), exact bf16 -> f32,
// round trips, same-dtype copies of every dtype, odd sizes, and the
// failures for unsupported pairs and shape mismatches.
#include "dapo/ops/cast.h"

#include <cmath>
#include <cstring>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<uint16_t> cast_to_bf16_bits(std::vector<float> in) {
  std::vector<bf16> out(in.size());
  const int64_t n = int64_t(in.size());
  ops::cast(test::cpu_ctx(), tensor_bf16(out.data(), {n}), tensor_f32(in.data(), {n}));
  std::vector<uint16_t> bits;
  for (bf16 b : out) bits.push_back(b.bits);
  return bits;
}

TEST(Cast, F32ToBf16BitPatterns) {
  struct Case {
    uint32_t f32_bits;
    uint16_t bf16_bits;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80, "1.0"},
      {0xbf800000u, 0xbf80, "-1.0"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x3f808000u, 0x3f80, "1 + 2^-8: tie, rounds down to the even 0x3f80"},
      {0x3f818000u, 0x3f82, "1 + 3*2^-8: tie, rounds up to the even 0x3f82"},
      {0x3f808001u, 0x3f81, "just above a tie rounds up"},
      {0x3f807fffu, 0x3f80, "just below a tie rounds down"},
      {0xbf818000u, 0xbf82, "negative tie to even"},
      {0x40490fdbu, 0x4049, "pi"},
      {0x7f800000u, 0x7f80, "+inf"},
      {0xff800000u, 0xff80, "-inf"},
      {0x7f7f0000u, 0x7f7f, "largest finite bf16, exact"},
      {0x7f7f7fffu, 0x7f7f, "below the overflow tie stays finite"},
      {0x7f7f8000u, 0x7f80, "overflow tie rounds to +inf"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to +inf"},
      {0xff7fffffu, 0xff80, "-FLT_MAX rounds to -inf"},
      {0x00010000u, 0x0001, "smallest bf16 subnormal, exact"},
      {0x00008000u, 0x0000, "subnormal tie rounds to even 0"},
      {0x00018000u, 0x0002, "subnormal tie rounds to even 2"},
      {0x007f8000u, 0x0080, "largest subnormal tie carries into the smallest normal"},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(from_bits(c.f32_bits));
  const auto got = cast_to_bf16_bits(in);
  for (size_t i = 0; i < std::size(cases); ++i)
    EXPECT_EQ(got[i], cases[i].bf16_bits) << cases[i].what << std::hex << ": got 0x" << got[i];
}

TEST(Cast, NaNStaysNaN) {
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u /* signalling */, 0x7fffffffu,
                           0x7f80ffffu /* payload only in the low half */};
  std::vector<float> in;
  for (uint32_t u : nans) in.push_back(from_bits(u));
  const auto got = cast_to_bf16_bits(in);
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(testing::Message() << std::hex << "input 0x" << nans[i] << " -> 0x" << got[i]);
    EXPECT_EQ(got[i] & 0x7f80, 0x7f80);  // exponent all ones
    EXPECT_NE(got[i] & 0x007f, 0);       // non-zero mantissa: NaN, not inf
    EXPECT_EQ(got[i] & 0x8000, (nans[i] >> 16) & 0x8000);  // sign kept
  }
}

TEST(Cast, Bf16ToF32IsExact) {
  const uint16_t patterns[] = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0x7f80,
                               0xff80, 0x0001, 0x4049, 0x7fc0, 0x1234};
  const int64_t n = int64_t(std::size(patterns));
  std::vector<bf16> in;
  for (uint16_t p : patterns) in.push_back(bf16{p});
  std::vector<float> out(n);
  ops::cast(test::cpu_ctx(), tensor_f32(out.data(), {n}), tensor_bf16(in.data(), {n}));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(bits_of(out[i]), uint32_t(patterns[i]) << 16) << i;
}

TEST(Cast, RoundTripAndOddShapes) {
  // 3 x 5 x 67 = 1005 elements: no multiple of any vector width.
  const int64_t A = 3, B = 5, C = 67, n = A * B * C;
  auto x = test::random_vector(n, 1, -1e3f, 1e3f);
  std::vector<bf16> h(n);
  std::vector<float> back(n);
  ops::cast(test::cpu_ctx(), tensor_bf16(h.data(), {A, B, C}), tensor_f32(x.data(), {A, B, C}));
  ops::cast(test::cpu_ctx(), tensor_f32(back.data(), {A, B, C}), tensor_bf16(h.data(), {A, B, C}));
  for (int64_t i = 0; i < n; ++i) {
    // Independent check of round-to-nearest: no other bf16 neighbour is closer.
    const double err = std::fabs(double(back[i]) - x[i]);
    const double ulp = std::ldexp(1.0, std::ilogb(back[i]) - 7);
    ASSERT_LE(err, 0.5 * ulp) << i;
    ASSERT_EQ(bits_of(back[i]) & 0xffffu, 0u) << i;
  }
  // Values that are exact in bf16 survive the round trip bit for bit.
  std::vector<float> again(n);
  std::vector<bf16> h2(n);
  ops::cast(test::cpu_ctx(), tensor_bf16(h2.data(), {n}), tensor_f32(back.data(), {n}));
  ops::cast(test::cpu_ctx(), tensor_f32(again.data(), {n}), tensor_bf16(h2.data(), {n}));
  EXPECT_EQ(0, std::memcmp(again.data(), back.data(), n * sizeof(float)));
}

template <class T>
void expect_copy(DType dtype) {
  const int64_t n = 1003;
  std::vector<T> in(n), out(n);
  for (int64_t i = 0; i < n; ++i) std::memcpy(&in[i], &i, std::min(sizeof(T), sizeof(i)));
  ops::cast(test::cpu_ctx(), Tensor(out.data(), dtype, {n}), Tensor(in.data(), dtype, {n}));
  EXPECT_EQ(0, std::memcmp(out.data(), in.data(), n * sizeof(T))) << dtype_name(dtype);
  // Same buffer: a no-op.
  ops::cast(test::cpu_ctx(), Tensor(in.data(), dtype, {n}), Tensor(in.data(), dtype, {n}));
  EXPECT_EQ(0, std::memcmp(out.data(), in.data(), n * sizeof(T))) << dtype_name(dtype);
}

TEST(Cast, SameDtypeCopies) {
  expect_copy<float>(DType::f32);
  expect_copy<bf16>(DType::bf16);
  expect_copy<int32_t>(DType::i32);
  expect_copy<int64_t>(DType::i64);
}

TEST(Cast, LargeCopySpansSeveralChunks) {
  const int64_t n = (int64_t(1) << 19) + 7;  // 2 MiB + 28 bytes of f32
  auto x = test::random_vector(n, 2);
  std::vector<float> y(n, 0.0f);
  ops::cast(test::cpu_ctx(), tensor_f32(y.data(), {n}), tensor_f32(x.data(), {n}));
  EXPECT_EQ(x, y);
}

TEST(Cast, EmptyTensor) {
  std::vector<float> x;
  std::vector<bf16> y;
  ops::cast(test::cpu_ctx(), tensor_bf16(y.data(), {0, 4}), tensor_f32(x.data(), {0, 4}));
}

TEST(CastDeathTest, UnsupportedPairAndShapeMismatchFail) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int32_t> i(4);
  std::vector<float> f(4);
  std::vector<bf16> h(6);
  EXPECT_DEATH(ops::cast(test::cpu_ctx(), tensor_f32(f.data(), {4}), tensor_i32(i.data(), {4})),
               "not supported");
  EXPECT_DEATH(ops::cast(test::cpu_ctx(), tensor_bf16(h.data(), {2, 3}), tensor_f32(f.data(), {4})),
               "shape");
}

}  // namespace
}  // namespace dapo
