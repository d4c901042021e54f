// Sum of squares: against a double-precision sum, bit-identical for any
// thread count, and the chunking edge cases.
#include "dapo/ops/sum_squares.h"

#include <omp.h>

#include <cstring>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

float sum_squares(std::vector<float>& x) {
  float out = -1.0f;
  ops::sum_squares(test::cpu_ctx(), tensor_f32(&out, {1}), tensor_f32(x.data(), {int64_t(x.size())}));
  return out;
}

double reference(const std::vector<float>& x) {
  long double s = 0;
  for (float v : x) s += (long double)v * v;
  return double(s);
}

TEST(SumSquares, MatchesDoubleSum) {
  // Sizes around the chunk and lane boundaries, and one large buffer with
  // values of very different magnitudes (where an fp32 sum would lose the
  // small ones).
  for (int64_t n : {1, 7, 8, 9, 4095, 4096, 4097, 12345, 1048576 + 3}) {
    auto x = test::random_vector(size_t(n), uint32_t(n), -3, 3);
    for (int64_t i = 0; i < n; i += 5) x[i] *= 1e-3f;
    const double want = reference(x);
    // The double sum is exact to ~1e-13 here, so the fp32 result must be
    // the correctly rounded value or its neighbour.
    EXPECT_NEAR(sum_squares(x), want, 1.2e-7 * want) << "n = " << n;
  }
  std::vector<float> x{3.0f, -4.0f};
  EXPECT_EQ(sum_squares(x), 25.0f);
}

TEST(SumSquares, EmptyIsZero) {
  std::vector<float> x;
  float out = -1.0f, dummy = 0;
  ops::sum_squares(test::cpu_ctx(), tensor_f32(&out, {1}), tensor_f32(&dummy, {0}));
  EXPECT_EQ(out, 0.0f);
}

TEST(SumSquares, DeterministicForAnyThreadCount) {
  const int64_t n = 3 * 1048576 + 17;  // more than 256 minimum-size chunks
  auto x = test::random_vector(size_t(n), 5, -10, 10);
  for (int64_t i = 0; i < n; i += 3) x[i] *= 1e-4f;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const float ref = sum_squares(x);
  for (int threads : {2, 3, 5, 8}) {
    omp_set_num_threads(threads);
    const float got = sum_squares(x);
    EXPECT_EQ(std::memcmp(&got, &ref, sizeof got), 0) << threads << " threads: " << got << " vs " << ref;
  }
  omp_set_num_threads(saved);
  EXPECT_NEAR(ref, reference(x), 1.2e-7 * reference(x));
}

TEST(SumSquares, AnyShapeIsFlat) {
  auto x = test::random_vector(60, 9);
  float flat = 0, shaped = 0;
  ops::sum_squares(test::cpu_ctx(), tensor_f32(&flat, {1}), tensor_f32(x.data(), {60}));
  ops::sum_squares(test::cpu_ctx(), tensor_f32(&shaped, {1}), tensor_f32(x.data(), {3, 4, 5}));
  EXPECT_EQ(flat, shaped);
}

}  // namespace
}  // namespace dapo
