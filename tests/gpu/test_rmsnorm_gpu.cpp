// RMSNorm and the fused residual_rmsnorm (rmsnorm.h) on the GPU, f32 and
// bf16, beyond the comparison with the CPU (test_backend_ops_norm.cpp has
// that): the backwards give the same bits on a rerun (dweight through
// fixed-order partials, no atomics), and the residual stream updated in
// place (sum in the buffer of a) gives the bits of a separate sum.
#include <cstring>

#include "dapo/ops/rmsnorm.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

constexpr float kEps = 1e-6f;

class RmsnormGpu : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(RmsnormGpu, BackwardIsBitIdentical) {
  const DType dt = GetParam();
  for (const auto [N, C] : shapes::norm_shapes()) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    const auto x = random_bf16_exact(size_t(N * C), 1, -3, 3), w = random_bf16_exact(size_t(C), 2, 0.5f, 1.5f);
    const auto dout = random_bf16_exact(size_t(N * C), 3), dw0 = random_bf16_exact(size_t(C), 4);
    Tensor gx = upload(x, {N, C}, dt), gw = upload(w, {C}, dt), gdout = upload(dout, {N, C}, dt);
    Tensor gout = device_empty(dt, {N, C}), grstd = device_empty(DType::f32, {N});
    ops::rmsnorm_forward(gpu(), gout, grstd, gx, gw, kEps);
    std::vector<std::vector<unsigned char>> dins, dws;
    for (int run = 0; run < 2; ++run) {
      Tensor gdin = guarded(dt, {N, C}), gdw = upload(dw0, {C});
      ops::rmsnorm_backward(gpu(), gdin, gdw, gdout, gx, gw, grstd);
      dins.push_back(bits(gdin));
      dws.push_back(bits(gdw));
    }
    EXPECT_TRUE(dins[0] == dins[1]) << "din differs between two runs";
    EXPECT_TRUE(dws[0] == dws[1]) << "dweight differs between two runs";
    check_guards();
  }
}

TEST_P(RmsnormGpu, ResidualSumInPlaceOfAGivesTheSameBits) {
  const DType dt = GetParam();
  for (const auto [N, C] : shapes::norm_shapes()) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    const auto a = random_bf16_exact(size_t(N * C), 5, -3, 3), b = random_bf16_exact(size_t(N * C), 6, -1, 1);
    const auto w = random_bf16_exact(size_t(C), 7, 0.5f, 1.5f);
    Tensor ga = upload(a, {N, C}, dt), gb = upload(b, {N, C}, dt), gw = upload(w, {C}, dt);
    Tensor gsum = guarded(dt, {N, C}), gout = guarded(dt, {N, C}), grstd = guarded(DType::f32, {N});
    ops::residual_rmsnorm_forward(gpu(), gsum, gout, grstd, ga, gb, gw, kEps);
    // sum in place of a (the residual stream updated in place).
    Tensor ga2 = upload(a, {N, C}, dt), gout2 = guarded(dt, {N, C}), grstd2 = guarded(DType::f32, {N});
    ops::residual_rmsnorm_forward(gpu(), ga2, gout2, grstd2, ga2, gb, gw, kEps);
    EXPECT_TRUE(bits(ga2) == bits(gsum)) << "sum in place of a";
    EXPECT_TRUE(bits(gout2) == bits(gout)) << "out with sum in place of a";
    EXPECT_TRUE(bits(grstd2) == bits(grstd)) << "rstd with sum in place of a";
    check_guards();
  }
}

TEST_P(RmsnormGpu, ResidualBackwardIsBitIdentical) {
  const DType dt = GetParam();
  for (const auto [N, C] : shapes::norm_shapes()) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    const auto a = random_bf16_exact(size_t(N * C), 5, -3, 3), b = random_bf16_exact(size_t(N * C), 6, -1, 1);
    const auto w = random_bf16_exact(size_t(C), 7, 0.5f, 1.5f), dout = random_bf16_exact(size_t(N * C), 8);
    const auto dsum0 = random_bf16_exact(size_t(N * C), 9), dw0 = random_bf16_exact(size_t(C), 10);
    Tensor gw = upload(w, {C}, dt), gdout = upload(dout, {N, C}, dt);
    Tensor gsum = device_empty(dt, {N, C}), gout = device_empty(dt, {N, C}), grstd = device_empty(DType::f32, {N});
    ops::residual_rmsnorm_forward(gpu(), gsum, gout, grstd, upload(a, {N, C}, dt), upload(b, {N, C}, dt), gw, kEps);
    std::vector<std::vector<unsigned char>> dsums, dws;
    for (int run = 0; run < 2; ++run) {
      Tensor gdsum = upload(dsum0, {N, C}, dt), gdw = upload(dw0, {C});
      ops::residual_rmsnorm_backward(gpu(), gdsum, gdw, gdout, gsum, gw, grstd);
      dsums.push_back(bits(gdsum));
      dws.push_back(bits(gdw));
    }
    EXPECT_TRUE(dsums[0] == dsums[1]) << "dsum differs between two runs";
    EXPECT_TRUE(dws[0] == dws[1]) << "dweight differs between two runs";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RmsnormGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace dapo::test
