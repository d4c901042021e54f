// linear_forward_multi on the CPU: each segment equals its own
// linear_forward (bias or none, segments of different widths, K == 0, no
// rows), and outputs that alias an input or each other are refused.

#include "dapo/ops/matmul.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

TEST(LinearMulti, EachSegmentEqualsItsOwnLinearForward) {
  struct Case {
    int64_t M, K;
    std::vector<int64_t> N;
  };
  uint32_t seed = 1;
  for (const Case& c : {Case{5, 12, {7, 3, 3}}, Case{1, 8, {4}}, Case{9, 17, {6, 1, 2, 5}}, Case{0, 4, {3, 2}},
                        Case{3, 0, {4, 2}}}) {
    SCOPED_TRACE(testing::Message() << "M " << c.M << " K " << c.K << " segments " << c.N.size());
    auto in = test::random_vector(size_t(c.M * c.K), ++seed);
    std::vector<std::vector<float>> w, b, got, want;
    for (size_t i = 0; i < c.N.size(); ++i) {
      w.push_back(test::random_vector(size_t(c.N[i] * c.K), ++seed));
      b.push_back(test::random_vector(size_t(c.N[i]), ++seed));
      got.push_back(std::vector<float>(size_t(c.M * c.N[i]), std::numeric_limits<float>::quiet_NaN()));
      want.push_back(std::vector<float>(size_t(c.M * c.N[i])));
    }
    std::vector<ops::LinearSegment> segs;
    for (size_t i = 0; i < c.N.size(); ++i) {
      const bool bias = i % 2 == 0;  // with and without in one call
      segs.push_back({f32(got[i], {c.M, c.N[i]}), f32(w[i], {c.N[i], c.K}), bias ? f32(b[i], {c.N[i]}) : Tensor{}});
      ops::linear_forward(test::cpu_ctx(), f32(want[i], {c.M, c.N[i]}), f32(in, {c.M, c.K}), f32(w[i], {c.N[i], c.K}),
                          bias ? f32(b[i], {c.N[i]}) : Tensor{});
    }
    ops::linear_forward_multi(test::cpu_ctx(), f32(in, {c.M, c.K}), segs);
    for (size_t i = 0; i < c.N.size(); ++i) test::expect_close(got[i], want[i], 0, 0, "segment");
  }
}

TEST(LinearMulti, RefusesAliasedOutputsAndTooManySegments) {
  std::vector<float> in(4 * 3, 1.0f), w(2 * 3, 1.0f), out(4 * 4, 0.0f);
  const Tensor x = f32(in, {4, 3}), wt = f32(w, {2, 3});
  const Tensor a = tensor_f32(out.data(), {4, 2}), b = tensor_f32(out.data() + 7, {4, 2});
  const std::vector<ops::LinearSegment> overlapping = {{a, wt, Tensor{}}, {b, wt, Tensor{}}};
  EXPECT_DEATH(ops::linear_forward_multi(test::cpu_ctx(), x, overlapping), "overlap");
  const std::vector<ops::LinearSegment> onto_input = {{tensor_f32(in.data(), {4, 2}), wt, Tensor{}}};
  EXPECT_DEATH(ops::linear_forward_multi(test::cpu_ctx(), x, onto_input), "overlaps in");
  const std::vector<ops::LinearSegment> five(5, ops::LinearSegment{a, wt, Tensor{}});
  EXPECT_DEATH(ops::linear_forward_multi(test::cpu_ctx(), x, five), "segments");
  EXPECT_DEATH(ops::linear_forward_multi(test::cpu_ctx(), x, std::span<const ops::LinearSegment>{}), "segments");
}

// Dtypes: every weight of in's, outputs f32 unless the operands are bf16;
// the f32 reference then refuses bf16 (CUDA's case).
TEST(LinearMulti, RefusesDtypesTheContractDoesNotList) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> in(4 * 3), w(2 * 3), out(4 * 2);
  std::vector<bf16> wh(2 * 3), outh(4 * 2), inh(4 * 3);
  const Tensor x = f32(in, {4, 3});
  const std::vector<ops::LinearSegment> bf16_weight = {{f32(out, {4, 2}), tensor_bf16(wh.data(), {2, 3}), Tensor{}}};
  EXPECT_DEATH(ops::linear_forward_multi(test::cpu_ctx(), x, bf16_weight),
               "linear_forward_multi: segment 0's weight is bf16, expected f32");
  const std::vector<ops::LinearSegment> bf16_out = {{tensor_bf16(outh.data(), {4, 2}), f32(w, {2, 3}), Tensor{}}};
  EXPECT_DEATH(ops::linear_forward_multi(test::cpu_ctx(), x, bf16_out), "f32 operands into segment 0's out");
  const std::vector<ops::LinearSegment> bf16_all = {
      {tensor_bf16(outh.data(), {4, 2}), tensor_bf16(wh.data(), {2, 3}), Tensor{}}};
  EXPECT_DEATH(ops::linear_forward_multi(test::cpu_ctx(), tensor_bf16(inh.data(), {4, 3}), bf16_all),
               "in is bf16, expected f32");
}

}  // namespace
}  // namespace dapo
