// SwiGLU on the GPU (f32 and bf16) against the CPU reference.
#include "dapo/ops/swiglu.h"

#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

class SwigluGpu : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(SwigluGpu, ForwardAndBackwardMatchCpu) {
  const DType dt = GetParam();
  // Odd sizes: no reliance on multiples. 37 x 1000 is whole 16-byte packs;
  // 37 x 1001 and 1 x 5 leave a tail; `shift` moves every tensor off 16-byte
  // alignment (the element path).
  struct Case {
    int64_t N, I, shift;
  };
  for (const Case c : {Case{37, 1000, 0}, Case{37, 1001, 0}, Case{1, 5, 0}, Case{37, 1000, 1}, Case{0, 64, 0}}) {
    const int64_t N = c.N, I = c.I;
    SCOPED_TRACE(testing::Message() << "N " << N << " I " << I << " shift " << c.shift);
    const auto gate = random_bf16_exact(N * I, 1, -6, 6), up = random_bf16_exact(N * I, 2);
    const auto dout = random_bf16_exact(N * I, 3);
    std::vector<float> out(N * I), dgate(N * I), dup(N * I);
    auto h = [](const std::vector<float>& v, int64_t a, int64_t b) { return tensor_f32(const_cast<float*>(v.data()), {a, b}); };
    ops::swiglu_forward(cpu(), h(out, N, I), h(gate, N, I), h(up, N, I));
    ops::swiglu_backward(cpu(), h(dgate, N, I), h(dup, N, I), h(dout, N, I), h(gate, N, I), h(up, N, I));

    // A (N, I) device tensor starting `shift` elements into its allocation.
    auto shifted = [&](Tensor t) {
      if (c.shift == 0) return t;
      Tensor s = device_empty(dt, {N * I + c.shift});
      s.data = static_cast<char*>(s.data) + c.shift * int64_t(dtype_size(dt));
      EXPECT_EQ(cudaMemcpyAsync(s.data, t.data, t.nbytes(), cudaMemcpyDeviceToDevice,
                                static_cast<cudaStream_t>(gpu().stream)),
                cudaSuccess);
      device_->synchronize();
      return Tensor(s.data, dt, {N, I}, Device::cuda);
    };
    Tensor g = shifted(upload(gate, {N, I}, dt)), u = shifted(upload(up, {N, I}, dt));
    Tensor d = shifted(upload(dout, {N, I}, dt));
    Tensor o = shifted(guarded(dt, {N, I})), dg = shifted(guarded(dt, {N, I})), du = shifted(guarded(dt, {N, I}));
    ops::swiglu_forward(gpu(), o, g, u);
    ops::swiglu_backward(gpu(), dg, du, d, g, u);
    device_->synchronize();
    const double tol = dt == DType::f32 ? 1e-5 : 8e-3;  // bf16 output rounding: 2^-8 relative
    expect_close(download(o), out, tol, tol, "out");
    expect_close(download(dg), dgate, tol, tol, "dgate");
    expect_close(download(du), dup, tol, tol, "dup");
    check_guards();
  }
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
  // The bandwidth ceiling these numbers compare with: a device-to-device copy (read + write).
  const size_t bytes = size_t(512) << 20;
  void* src = big.alloc_bytes(bytes);
  void* dst = big.alloc_bytes(bytes);
  const double ms = time_ms(ctx.stream, [&] {
    EXPECT_EQ(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.stream)),
              cudaSuccess);
  }, 20);
  print_perf("memcpy_d2d", "512MiB", "bytes", ms, 2.0 * double(bytes));
}

}  // namespace
}  // namespace dapo::test
