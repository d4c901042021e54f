// sum_squares on the GPU beyond the comparison with the CPU
// (test_backend_ops_elementwise.cpp): the same bits on a rerun and for a
// buffer off 16-byte alignment (the chunks depend on N only).
#include "dapo/ops/sum_squares.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

TEST_F(GpuTest, SumSquaresIsReproducibleAndIndependentOfTheAlignment) {
  for (const int64_t N : {int64_t(0), int64_t(1), int64_t(3), int64_t(1000), int64_t(65537), int64_t(20000003)}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N);
    const size_t mark = arena_->mark();
    auto x = random_bf16_exact(size_t(N), uint32_t(N % 1000 + 3), -3, 3);
    for (int64_t i = 0; i < N; i += 13) x[size_t(i)] *= 1e-3f;
    Tensor a = upload(x, {N});
    Tensor shifted_buf = device_empty(DType::f32, {N + 1});
    Tensor b(static_cast<float*>(shifted_buf.data) + 1, DType::f32, {N}, Device::cuda);
    if (N > 0) device_->copy_to_device(b, Tensor(x.data(), DType::f32, {N}));
    Tensor out = guarded(DType::f32, {1});
    ops::sum_squares(gpu(), out, a);
    const auto r1 = bits(out);
    ops::sum_squares(gpu(), out, a);
    const auto r2 = bits(out);
    ops::sum_squares(gpu(), out, b);
    const auto r3 = bits(out);
    EXPECT_TRUE(r1 == r2) << "not bit-reproducible";
    EXPECT_TRUE(r1 == r3) << "depends on the alignment";
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
}

}  // namespace
}  // namespace dapo::test
