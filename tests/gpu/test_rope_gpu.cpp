// RoPE on the GPU (f32 and bf16) beyond the comparison with the CPU
// (test_backend_ops_elementwise.cpp): in place (out == in, din == dout)
// gives the bits of out of place, at the harness's shapes.
#include "dapo/ops/rope.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

class RopeGpu : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(RopeGpu, InPlaceGivesTheBitsOfOutOfPlace) {
  const DType dt = GetParam();
  for (const auto [T, H, D] : shapes::rope_shapes()) {
    SCOPED_TRACE(testing::Message() << "T " << T << " H " << H << " D " << D);
    const std::vector<int32_t> pos = shapes::rope_positions(T, D);
    const auto x = random_bf16_exact(size_t(T * H * D), 1, -2, 2), dy = random_bf16_exact(size_t(T * H * D), 2, -2, 2);
    Tensor gpos = upload_raw(pos, {T});
    Tensor gy = guarded(dt, {T, H, D}), gdx = guarded(dt, {T, H, D});
    ops::rope_forward(gpu(), gy, upload(x, {T, H, D}, dt), gpos, ops::kRopeThetaQwen2);
    ops::rope_backward(gpu(), gdx, upload(dy, {T, H, D}, dt), gpos, ops::kRopeThetaQwen2);
    Tensor gx2 = upload(x, {T, H, D}, dt), gdy2 = upload(dy, {T, H, D}, dt);
    ops::rope_forward(gpu(), gx2, gx2, gpos, ops::kRopeThetaQwen2);
    ops::rope_backward(gpu(), gdy2, gdy2, gpos, ops::kRopeThetaQwen2);
    EXPECT_TRUE(bits(gx2) == bits(gy)) << "in-place forward";
    EXPECT_TRUE(bits(gdy2) == bits(gdx)) << "in-place backward";
    check_guards();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RopeGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace dapo::test
