// Rotary embedding: forward against the rotate_half formula in double (with
// HF's fp32 angles where positions are large), norm preservation, relative-
// position property, inverse and finite-difference gradient, in-place use.
#include "dapo/ops/rope.h"

#include <cmath>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

// The angle of pair i at position p. hf_fp32: HF's recipe (fp32 pow, fp32
// divide, one fp32 product); otherwise exact in double.
double rope_angle(int32_t p, int64_t i, int64_t D, float theta, bool hf_fp32) {
  if (hf_fp32) {
    const float inv_freq = 1.0f / std::pow(theta, float(2 * i) / float(D));
    return double(float(p) * inv_freq);
  }
  return double(p) / std::pow(double(theta), double(2 * i) / double(D));
}

std::vector<float> naive_rope(const std::vector<float>& x, const std::vector<int32_t>& pos,
                              int64_t H, int64_t D, float theta, bool hf_fp32) {
  const int64_t T = int64_t(pos.size()), half = D / 2;
  std::vector<float> y(x.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double a = rope_angle(pos[t], i, D, theta, hf_fp32);
        const double x1 = x[(t * H + h) * D + i], x2 = x[(t * H + h) * D + i + half];
        y[(t * H + h) * D + i] = float(x1 * std::cos(a) - x2 * std::sin(a));
        y[(t * H + h) * D + i + half] = float(x2 * std::cos(a) + x1 * std::sin(a));
      }
  return y;
}

struct RopeCase {
  int64_t H, D;
  std::vector<int32_t> pos;
  float theta;
};

void run_forward(const RopeCase& c, std::vector<float>& out, std::vector<float>& in) {
  const int64_t T = int64_t(c.pos.size());
  ops::rope_forward(test::cpu_ctx(), tensor_f32(out.data(), {T, c.H, c.D}),
                    tensor_f32(in.data(), {T, c.H, c.D}),
                    tensor_i32(const_cast<int32_t*>(c.pos.data()), {T}), c.theta);
}

TEST(Rope, ForwardMatchesNaiveAtSmallPositions) {
  // Two packed sequences (positions restart at 0), Qwen2.5's and Llama's theta,
  // head dims that are not multiples of 4.
  for (float theta : {ops::kRopeThetaQwen2, 1.0e4f}) {
    for (int64_t D : {2, 6, 10, 64}) {
      RopeCase c{3, D, {0, 1, 2, 3, 4, 0, 1, 2, 7, 63}, theta};
      const int64_t T = int64_t(c.pos.size());
      auto x = test::random_vector(size_t(T * c.H * D), 11 + uint32_t(D));
      std::vector<float> y(x.size());
      run_forward(c, y, x);
      test::expect_close(y, naive_rope(x, c.pos, c.H, D, theta, false), 2e-6, 1e-5, "rope");
      // Position 0 is the identity.
      for (int64_t j = 0; j < c.H * D; ++j) EXPECT_EQ(y[j], x[j]);
    }
  }
}

TEST(Rope, LargePositionsUseHfFp32Angles) {
  // At positions in the tens of thousands the fp32 angle differs from the
  // exact one by ~1e-3 rad; the op must follow HF's fp32 recipe, and this
  // tolerance is tight enough to tell the two apart.
  RopeCase c{2, 64, {0, 1, 4095, 4096, 16383, 32767, 40000, 131071}, ops::kRopeThetaQwen2};
  const int64_t T = int64_t(c.pos.size());
  auto x = test::random_vector(size_t(T * c.H * c.D), 21);
  std::vector<float> y(x.size());
  run_forward(c, y, x);
  test::expect_close(y, naive_rope(x, c.pos, c.H, c.D, c.theta, true), 2e-6, 1e-5, "rope hf");
  const auto exact = naive_rope(x, c.pos, c.H, c.D, c.theta, false);
  double max_diff = 0;
  for (size_t i = 0; i < y.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(y[i]) - exact[i]));
  EXPECT_GT(max_diff, 1e-4) << "fp32 and exact angles should differ visibly here";
}

TEST(Rope, PreservesNormsAndDependsOnRelativePosition) {
  const int64_t H = 2, D = 12;
  RopeCase c{H, D, {0, 5, 17, 300, 1000}, ops::kRopeThetaQwen2};
  const int64_t T = int64_t(c.pos.size());
  auto x = test::random_vector(size_t(T * H * D), 31, -2, 2);
  std::vector<float> y(x.size());
  run_forward(c, y, x);
  for (int64_t r = 0; r < T * H; ++r) {
    double nx = 0, ny = 0;
    for (int64_t d = 0; d < D; ++d) {
      nx += double(x[r * D + d]) * x[r * D + d];
      ny += double(y[r * D + d]) * y[r * D + d];
    }
    EXPECT_NEAR(ny, nx, 1e-5 * nx) << "row " << r;
  }
  // <rope(q, p), rope(k, p')> depends on p - p' only.
  auto q = test::random_vector(size_t(D), 32), k = test::random_vector(size_t(D), 33);
  auto score = [&](int32_t pq, int32_t pk) {
    RopeCase one{1, D, {pq}, ops::kRopeThetaQwen2};
    std::vector<float> rq(D), rk(D);
    run_forward(one, rq, q);
    one.pos = {pk};
    run_forward(one, rk, k);
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += double(rq[d]) * rk[d];
    return s;
  };
  EXPECT_NEAR(score(7, 3), score(107, 103), 2e-4);
  EXPECT_NEAR(score(7, 3), score(4, 0), 2e-4);
  EXPECT_GT(std::fabs(score(7, 3) - score(7, 7)), 1e-3);
}

TEST(Rope, BackwardInvertsForwardInPlace) {
  const int64_t H = 3, D = 8;
  RopeCase c{H, D, {0, 1, 2, 0, 1, 0, 9, 12345}, ops::kRopeThetaQwen2};
  const int64_t T = int64_t(c.pos.size());
  const auto x = test::random_vector(size_t(T * H * D), 41);
  std::vector<float> out_of_place(x.size()), xcopy = x;
  run_forward(c, out_of_place, xcopy);
  // In place: out and in are the same buffer.
  std::vector<float> buf = x;
  run_forward(c, buf, buf);
  EXPECT_EQ(buf, out_of_place);
  ops::rope_backward(test::cpu_ctx(), tensor_f32(buf.data(), {T, H, D}), tensor_f32(buf.data(), {T, H, D}),
                     tensor_i32(c.pos.data(), {T}), c.theta);
  test::expect_close(buf, x, 1e-6, 1e-6, "rope inverse");
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const int64_t H = 2, D = 6;
  RopeCase c{H, D, {3, 0, 1, 2, 50}, 1.0e4f};
  const int64_t T = int64_t(c.pos.size());
  auto x = test::random_vector(size_t(T * H * D), 51);
  const auto dout = test::random_vector(x.size(), 52);
  std::vector<float> din(x.size()), y(x.size());
  ops::rope_backward(test::cpu_ctx(), tensor_f32(din.data(), {T, H, D}),
                     tensor_f32(const_cast<float*>(dout.data()), {T, H, D}),
                     tensor_i32(c.pos.data(), {T}), c.theta);
  auto loss = [&] {
    run_forward(c, y, x);
    return test::dot(dout, y);
  };
  test::expect_gradient("din", x, din, loss, x.size());
}

TEST(Rope, EmptyInputIsANoOp) {
  RopeCase c{4, 8, {}, ops::kRopeThetaQwen2};
  std::vector<float> x, y;
  run_forward(c, y, x);
  ops::rope_backward(test::cpu_ctx(), tensor_f32(nullptr, {0, 4, 8}), tensor_f32(nullptr, {0, 4, 8}),
                     tensor_i32(nullptr, {0}), c.theta);
}

TEST(RopeDeathTest, OddHeadDimensionIsAnError) {
  std::vector<float> x(2 * 5);
  std::vector<int32_t> pos{0, 1};
  EXPECT_EXIT(ops::rope_forward(test::cpu_ctx(), tensor_f32(x.data(), {2, 1, 5}),
                                tensor_f32(x.data(), {2, 1, 5}), tensor_i32(pos.data(), {2}), 1e4f),
              testing::ExitedWithCode(1), "must be even");
}

TEST(RopeDeathTest, PartialOverlapAndBadThetaAreErrors) {
  std::vector<float> x(3 * 1 * 4);
  std::vector<int32_t> pos{0, 1};
  // din one token past dout in the same buffer: it would read rotated values.
  EXPECT_EXIT(ops::rope_backward(test::cpu_ctx(), tensor_f32(x.data() + 4, {2, 1, 4}), tensor_f32(x.data(), {2, 1, 4}),
                                 tensor_i32(pos.data(), {2}), 1e4f),
              testing::ExitedWithCode(1), "rope_backward: din and dout overlap without being the same buffer");
  EXPECT_EXIT(ops::rope_forward(test::cpu_ctx(), tensor_f32(x.data(), {2, 1, 4}), tensor_f32(x.data(), {2, 1, 4}),
                                tensor_i32(pos.data(), {2}), 0.0f),
              testing::ExitedWithCode(1), "rope_forward: theta 0 must be positive");
}

}  // namespace
}  // namespace dapo
