// SwiGLU on the GPU (f32 and bf16) against the CPU reference.
#include "dapo/ops/swiglu.h"

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

}  // namespace
}  // namespace dapo::test
