// SwiGLU on the GPU (f32 and bf16) against the CPU reference.
#include "dapo/ops/swiglu.h"

#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

class SwigluGpu : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(SwigluGpu, ForwardAndBackwardMatchCpu) {
  const DType dt = GetParam();
  const int64_t N = 37, I = 1000;  // odd sizes: no reliance on multiples
  const auto gate = random_bf16_exact(N * I, 1, -6, 6), up = random_bf16_exact(N * I, 2);
  const auto dout = random_bf16_exact(N * I, 3);
  std::vector<float> out(N * I), dgate(N * I), dup(N * I);
  auto h = [](const std::vector<float>& v, int64_t a, int64_t b) { return tensor_f32(const_cast<float*>(v.data()), {a, b}); };
  ops::swiglu_forward(cpu(), h(out, N, I), h(gate, N, I), h(up, N, I));
  ops::swiglu_backward(cpu(), h(dgate, N, I), h(dup, N, I), h(dout, N, I), h(gate, N, I), h(up, N, I));

  Tensor g = upload(gate, {N, I}, dt), u = upload(up, {N, I}, dt), d = upload(dout, {N, I}, dt);
  Tensor o = device_empty(dt, {N, I}), dg = device_empty(dt, {N, I}), du = device_empty(dt, {N, I});
  ops::swiglu_forward(gpu(), o, g, u);
  ops::swiglu_backward(gpu(), dg, du, d, g, u);
  device_->synchronize();
  const double tol = dt == DType::f32 ? 1e-5 : 8e-3;  // bf16 output rounding: 2^-8 relative
  expect_close(download(o), out, tol, tol, "out");
  expect_close(download(dg), dgate, tol, tol, "dgate");
  expect_close(download(du), dup, tol, tol, "dup");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SwigluGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_F(GpuTest, SwigluPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  Arena big(size_t(2) << 30, Device::cuda, "perf");
  for (const int64_t I : {int64_t(8960), int64_t(4864)}) {  // Qwen2.5-1.5B, 0.5B
    const int64_t N = 16384;
    ArenaScope scope(big);
    Tensor gate = big.alloc(DType::bf16, {N, I}), up = big.alloc(DType::bf16, {N, I});
    Tensor out = big.alloc(DType::bf16, {N, I});
    fill_random(*device_, gate, 1, -6, 6);
    fill_random(*device_, up, 2);
    const std::string shape = "N=" + std::to_string(N) + ",I=" + std::to_string(I);
    const double t = double(N) * I * 2;  // one bf16 (N, I) tensor
    double ms = time_ms(ctx.stream, [&] { ops::swiglu_forward(ctx, out, gate, up); }, 20);
    print_perf("swiglu_forward", shape, "bf16", ms, 3 * t);
    // dout: the forward's out (any non-zero values do).
    Tensor dgate = big.alloc(DType::bf16, {N, I}), dup = big.alloc(DType::bf16, {N, I});
    ms = time_ms(ctx.stream, [&] { ops::swiglu_backward(ctx, dgate, dup, out, gate, up); }, 20);
    print_perf("swiglu_backward", shape, "bf16", ms, 5 * t);
  }
}

}  // namespace
}  // namespace dapo::test
