// RoPE on the GPU (f32 and bf16) against the CPU reference: D = 64 and 128
// (16-byte packs), an odd half (element path), positions up to 32k (where
// the fp32 angle recipe matters), empty and one-token batches, in place
// equal to out of place; and the perf case.
#include "dapo/ops/rope.h"

#include <cstring>

#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

Tensor host(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

class RopeGpu : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(RopeGpu, MatchesCpu) {
  const DType dt = GetParam();
  // f32: cos/sin may differ from the CPU's libm in the last bit; bf16: one output rounding.
  const double tol = dt == DType::f32 ? 2e-6 : 8e-3;
  struct Shape {
    int64_t T, H, D;
  };
  for (const Shape s : {Shape{37, 3, 128}, Shape{29, 14, 64}, Shape{70, 2, 6}, Shape{1, 12, 128},
                        Shape{0, 2, 64}, Shape{4096, 2, 128}}) {
    const int64_t T = s.T, H = s.H, D = s.D;
    SCOPED_TRACE(testing::Message() << "T " << T << " H " << H << " D " << D);
    std::mt19937 gen(unsigned(T * 131 + D));
    std::uniform_int_distribution<int32_t> pos_dist(0, 32767);
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (auto& p : pos) p = pos_dist(gen);
    if (T > 1) pos[0] = 0, pos[1] = 32767;
    auto x = random_bf16_exact(T * H * D, 1, -2, 2), dy = random_bf16_exact(T * H * D, 2, -2, 2);
    std::vector<float> y(T * H * D), dx(T * H * D);
    ops::rope_forward(cpu(), host(y, {T, H, D}), host(x, {T, H, D}), tensor_i32(pos.data(), {T}), ops::kRopeThetaQwen2);
    ops::rope_backward(cpu(), host(dx, {T, H, D}), host(dy, {T, H, D}), tensor_i32(pos.data(), {T}),
                       ops::kRopeThetaQwen2);

    Tensor gpos = upload_raw(pos, {T}), gx = upload(x, {T, H, D}, dt), gdy = upload(dy, {T, H, D}, dt);
    Tensor gy = guarded(dt, {T, H, D}), gdx = guarded(dt, {T, H, D});
    ops::rope_forward(gpu(), gy, gx, gpos, ops::kRopeThetaQwen2);
    ops::rope_backward(gpu(), gdx, gdy, gpos, ops::kRopeThetaQwen2);
    const auto y_g = download(gy), dx_g = download(gdx);
    expect_close(y_g, y, tol, tol, "out");
    expect_close(dx_g, dx, tol, tol, "din");

    // In place: the same bits as out of place.
    Tensor gx2 = upload(x, {T, H, D}, dt), gdy2 = upload(dy, {T, H, D}, dt);
    ops::rope_forward(gpu(), gx2, gx2, gpos, ops::kRopeThetaQwen2);
    ops::rope_backward(gpu(), gdy2, gdy2, gpos, ops::kRopeThetaQwen2);
    EXPECT_TRUE(same_bits(download(gx2), y_g)) << "in-place forward";
    EXPECT_TRUE(same_bits(download(gdy2), dx_g)) << "in-place backward";
    check_guards();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RopeGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_F(GpuTest, RopePerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  Arena big(size_t(1) << 30, Device::cuda, "perf");
  struct Case {
    int64_t T, H, D;
  };
  for (const Case c : {Case{16384, 12, 128}, Case{16384, 14, 64}, Case{16384, 2, 128}}) {
    ArenaScope scope(big);
    std::vector<int32_t> pos(size_t(c.T));
    for (int64_t t = 0; t < c.T; ++t) pos[size_t(t)] = int32_t(t % 4096);  // packed sequences of 4096
    Tensor gpos = upload_raw(pos, {c.T});
    Tensor q = big.alloc(DType::bf16, {c.T, c.H, c.D}), out = big.alloc(DType::bf16, {c.T, c.H, c.D});
    fill_random(*device_, q, 1);
    const std::string shape =
        "T=" + std::to_string(c.T) + ",H=" + std::to_string(c.H) + ",D=" + std::to_string(c.D);
    const double bytes = 2.0 * double(c.T * c.H * c.D) * 2 + c.T * 4.0;
    double ms = time_ms(ctx.stream, [&] { ops::rope_forward(ctx, out, q, gpos, ops::kRopeThetaQwen2); });
    print_perf("rope_forward", shape, "bf16", ms, bytes);
    ms = time_ms(ctx.stream, [&] { ops::rope_backward(ctx, q, q, gpos, ops::kRopeThetaQwen2); });
    print_perf("rope_backward(in place)", shape, "bf16", ms, bytes);
  }
}

}  // namespace
}  // namespace dapo::test
