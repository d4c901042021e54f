// RMSNorm and the fused residual_rmsnorm on the GPU (f32 and bf16) against
// the CPU reference: odd row lengths (the element path), the model's C,
// empty and one-row batches, a large batch; guarded outputs, accumulated
// outputs that start non-zero, bitwise-repeatable dweight and din/dsum,
// sum written in place of a; and the perf case.
#include "dapo/ops/residual_rmsnorm.h"
#include "dapo/ops/rmsnorm.h"

#include <algorithm>
#include <cstring>

#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

struct Shape {
  int64_t N, C;
};
// 999: rows of no whole 16-byte packs (element path); 1000 and up: packs;
// 8192: four packs per thread.
const Shape kShapes[] = {{37, 1000}, {5, 999}, {33, 896}, {64, 1536}, {0, 1536}, {1, 1536}, {3, 8192},
                         {4099, 1536}};

Tensor host(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

void expect_finite(const std::vector<float>& v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) {
      ADD_FAILURE() << what << "[" << i << "] = " << v[i] << " (not written?)";
      return;
    }
}

class NormGpu : public GpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  // bf16 outputs carry one rounding (2^-9 relative); f32 only reduction-order differences.
  double out_tol() const { return GetParam() == DType::f32 ? 2e-5 : 8e-3; }
  // din/dsum: fp32 dot products over C in another order than the CPU's double.
  double din_atol() const { return GetParam() == DType::f32 ? 2e-5 : 8e-4; }
  // dweight sums N fp32 terms of size ~1 (fp32 partials vs the CPU's double).
  static double dw_atol(int64_t N) { return 1e-5 + 2e-6 * double(N); }
};

TEST_P(NormGpu, RmsnormMatchesCpu) {
  const DType dt = GetParam();
  const float eps = 1e-6f;
  for (const auto [N, C] : kShapes) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    auto x = random_bf16_exact(N * C, 1, -3, 3), w = random_bf16_exact(C, 2, 0.5f, 1.5f);
    auto dout = random_bf16_exact(N * C, 3);
    const auto dw0 = random_bf16_exact(C, 4);
    std::vector<float> out(N * C), rstd(N), din(N * C), dw = dw0;
    ops::rmsnorm_forward(cpu(), host(out, {N, C}), host(rstd, {N}), host(x, {N, C}), host(w, {C}), eps);
    ops::rmsnorm_backward(cpu(), host(din, {N, C}), host(dw, {C}), host(dout, {N, C}), host(x, {N, C}),
                          host(w, {C}), host(rstd, {N}));

    Tensor gx = upload(x, {N, C}, dt), gw = upload(w, {C}, dt), gdout = upload(dout, {N, C}, dt);
    Tensor gout = guarded(dt, {N, C}), grstd = guarded(DType::f32, {N});
    ops::rmsnorm_forward(gpu(), gout, grstd, gx, gw, eps);
    const auto out_g = download(gout), rstd_g = download(grstd);
    expect_finite(out_g, "out");
    expect_close(out_g, out, out_tol(), out_tol(), "out");
    expect_close(rstd_g, rstd, 0, 2e-5, "rstd");

    // The backward from the CPU's rstd, so that only the backward differs.
    Tensor grstd_c = upload(rstd, {N}), gdin = guarded(dt, {N, C});
    std::vector<std::vector<float>> dins, dws;
    for (int run = 0; run < 2; ++run) {
      Tensor gdw = upload(dw0, {C});
      ops::rmsnorm_backward(gpu(), gdin, gdw, gdout, gx, gw, grstd_c);
      dins.push_back(download(gdin));
      dws.push_back(download(gdw));
    }
    expect_finite(dins[0], "din");
    expect_close(dins[0], din, din_atol(), out_tol(), "din");
    expect_close(dws[0], dw, dw_atol(N), 1e-5, "dweight");
    EXPECT_TRUE(same_bits(dws[0], dws[1])) << "dweight differs between two runs";
    EXPECT_TRUE(same_bits(dins[0], dins[1])) << "din differs between two runs";
    check_guards();
  }
}

TEST_P(NormGpu, ResidualRmsnormMatchesCpu) {
  const DType dt = GetParam();
  const float eps = 1e-6f;
  for (const auto [N, C] : kShapes) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C);
    auto a = random_bf16_exact(N * C, 5, -3, 3), b = random_bf16_exact(N * C, 6, -1, 1);
    auto w = random_bf16_exact(C, 7, 0.5f, 1.5f), dout = random_bf16_exact(N * C, 8);
    const auto dsum0 = random_bf16_exact(N * C, 9), dw0 = random_bf16_exact(C, 10);

    Tensor ga = upload(a, {N, C}, dt), gb = upload(b, {N, C}, dt), gw = upload(w, {C}, dt);
    Tensor gsum = guarded(dt, {N, C}), gout = guarded(dt, {N, C}), grstd = guarded(DType::f32, {N});
    ops::residual_rmsnorm_forward(gpu(), gsum, gout, grstd, ga, gb, gw, eps);
    auto sum_g = download(gsum);
    const auto out_g = download(gout), rstd_g = download(grstd);
    expect_finite(sum_g, "sum");
    expect_finite(out_g, "out");
    std::vector<float> sum(N * C);
    for (int64_t i = 0; i < N * C; ++i) sum[i] = a[i] + b[i];
    expect_close(sum_g, sum, 0, dt == DType::f32 ? 0 : 4e-3, "sum");  // bf16: one rounding of a + b
    // The norm must be that of the stored (rounded) sum.
    std::vector<float> out(N * C), rstd(N);
    ops::rmsnorm_forward(cpu(), host(out, {N, C}), host(rstd, {N}), host(sum_g, {N, C}), host(w, {C}), eps);
    expect_close(out_g, out, out_tol(), out_tol(), "out");
    expect_close(rstd_g, rstd, 0, 2e-5, "rstd");

    // sum in place of a (the residual stream updated in place): the same bits.
    Tensor ga2 = upload(a, {N, C}, dt), gout2 = guarded(dt, {N, C}), grstd2 = guarded(DType::f32, {N});
    ops::residual_rmsnorm_forward(gpu(), ga2, gout2, grstd2, ga2, gb, gw, eps);
    EXPECT_TRUE(same_bits(download(ga2), sum_g)) << "sum in place of a";
    EXPECT_TRUE(same_bits(download(gout2), out_g)) << "out with sum in place of a";
    EXPECT_TRUE(same_bits(download(grstd2), rstd_g)) << "rstd with sum in place of a";

    // Backward: dsum += rmsnorm's din, from the CPU's rstd of the stored sum.
    std::vector<float> din(N * C), dw = dw0, dsum(N * C);
    ops::rmsnorm_backward(cpu(), host(din, {N, C}), host(dw, {C}), host(dout, {N, C}), host(sum_g, {N, C}),
                          host(w, {C}), host(rstd, {N}));
    for (int64_t i = 0; i < N * C; ++i) dsum[i] = dsum0[i] + din[i];
    Tensor gdout = upload(dout, {N, C}, dt), gsum_c = upload(sum_g, {N, C}, dt), grstd_c = upload(rstd, {N});
    std::vector<std::vector<float>> dsums, dws;
    for (int run = 0; run < 2; ++run) {
      Tensor gdsum = upload(dsum0, {N, C}, dt), gdw = upload(dw0, {C});
      ops::residual_rmsnorm_backward(gpu(), gdsum, gdw, gdout, gsum_c, gw, grstd_c);
      dsums.push_back(download(gdsum));
      dws.push_back(download(gdw));
    }
    expect_close(dsums[0], dsum, din_atol(), out_tol(), "dsum");
    expect_close(dws[0], dw, dw_atol(N), 1e-5, "dweight");
    EXPECT_TRUE(same_bits(dws[0], dws[1])) << "dweight differs between two runs";
    EXPECT_TRUE(same_bits(dsums[0], dsums[1])) << "dsum differs between two runs";
    check_guards();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NormGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_F(GpuTest, NormPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  Arena big(size_t(1) << 30, Device::cuda, "perf");
  const ops::Ctx ctx = gpu();
  for (const int64_t C : {int64_t(1536), int64_t(896)}) {
    const int64_t N = 16384;
    const std::string shape = "N=" + std::to_string(N) + ",C=" + std::to_string(C);
    const double row = double(N) * C * 2;  // one bf16 (N, C) tensor
    ArenaScope scope(big);
    Tensor x = big.alloc(DType::bf16, {N, C}), b = big.alloc(DType::bf16, {N, C});
    Tensor out = big.alloc(DType::bf16, {N, C}), sum = big.alloc(DType::bf16, {N, C});
    Tensor dout = big.alloc(DType::bf16, {N, C}), din = big.alloc(DType::bf16, {N, C});
    Tensor w = big.alloc(DType::bf16, {C}), rstd = big.alloc(DType::f32, {N}), dw = big.alloc(DType::f32, {C});
    fill_random(*device_, x, 1, -3, 3);
    fill_random(*device_, b, 2);
    fill_random(*device_, dout, 3);
    fill_random(*device_, din, 4);
    fill_random(*device_, w, 5, 0.5f, 1.5f);
    fill_random(*device_, dw, 6);
    double ms = time_ms(ctx.stream, [&] { ops::rmsnorm_forward(ctx, out, rstd, x, w, 1e-6f); });
    print_perf("rmsnorm_forward", shape, "bf16", ms, 2 * row + N * 4.0);
    ms = time_ms(ctx.stream, [&] { ops::rmsnorm_backward(ctx, din, dw, dout, x, w, rstd); });
    print_perf("rmsnorm_backward", shape, "bf16", ms, 3 * row + N * 4.0);
    ms = time_ms(ctx.stream, [&] { ops::residual_rmsnorm_forward(ctx, sum, out, rstd, x, b, w, 1e-6f); });
    print_perf("residual_rmsnorm_forward", shape, "bf16", ms, 4 * row + N * 4.0);
    ms = time_ms(ctx.stream, [&] { ops::residual_rmsnorm_forward(ctx, x, out, rstd, x, b, w, 1e-6f); });
    print_perf("residual_rmsnorm_forward(in place)", shape, "bf16", ms, 4 * row + N * 4.0);
    fill_random(*device_, x, 1, -3, 3);
    ms = time_ms(ctx.stream, [&] { ops::residual_rmsnorm_backward(ctx, din, dw, dout, x, w, rstd); });
    print_perf("residual_rmsnorm_backward", shape, "bf16", ms, 4 * row + N * 4.0);
  }
  check_guards();
}

}  // namespace
}  // namespace dapo::test
