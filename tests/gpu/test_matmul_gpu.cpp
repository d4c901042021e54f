// matmul / linear on the GPU (cuBLASLt) beyond the comparison with the CPU
// (test_backend_ops_gemm.cpp): the shape where split-K is likeliest gives
// the same bits on a rerun (weight and bias gradients accumulated from the
// same values, the forward with a bias), and linear_residual_forward
// refuses a res that overlaps out without being out.
#include "dapo/ops/matmul.h"

#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

struct Dtypes {
  DType ab, cd;  // operands, output
};
std::string dtypes_name(const Dtypes& d) { return std::string(dtype_name(d.ab)) + "_to_" + dtype_name(d.cd); }

class LinearGpu : public GpuTest, public ::testing::WithParamInterface<Dtypes> {};

// q/k/v's weight and bias gradients of a 16k-token micro-batch (K = tokens
// >> M, N), run twice from the same starting values; then the forward twice.
TEST_P(LinearGpu, LargeShapeIsBitIdentical) {
  const Dtypes dt = GetParam();
  const int64_t N = 16384, I = 1536, O = 256;
  Tensor gin = upload(random_bf16_exact(size_t(N * I), 401), {N, I}, dt.ab);
  Tensor gw = upload(random_bf16_exact(size_t(O * I), 402, -0.1f, 0.1f), {O, I}, dt.ab);
  Tensor gdout = upload(random_bf16_exact(size_t(N * O), 403), {N, O}, dt.ab);
  Tensor gbias = upload(random_bf16_exact(size_t(O), 404), {O}, dt.cd);
  const auto dw = random_bf16_exact(size_t(O * I), 405), db = random_bf16_exact(size_t(O), 406);
  std::vector<std::vector<unsigned char>> runs[4];
  for (int run = 0; run < 2; ++run) {
    Tensor gdin = guarded(dt.cd, {N, I}), gdw = upload(dw, {O, I}), gdb = upload(db, {O});
    Tensor gout = guarded(dt.cd, {N, O});
    ops::linear_backward(gpu(), gdin, gdw, gdb, gdout, gin, gw);
    ops::linear_forward(gpu(), gout, gin, gw, gbias);
    runs[0].push_back(bits(gdin));
    runs[1].push_back(bits(gdw));
    runs[2].push_back(bits(gdb));
    runs[3].push_back(bits(gout));
  }
  const char* names[] = {"din", "dweight", "dbias", "out"};
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(runs[i][0] == runs[i][1]) << names[i] << " differs between two runs";
  check_guards();
}

TEST_P(LinearGpu, ResidualForwardRejectsPartialOverlap) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Dtypes dt = GetParam();
  Tensor buf = device_empty(dt.cd, {9, 8});
  Tensor out = buf.slice_rows(0, 8), res = buf.slice_rows(1, 9);
  Tensor in = device_empty(dt.ab, {8, 4}), w = device_empty(dt.ab, {8, 4});
  EXPECT_DEATH(ops::linear_residual_forward(gpu(), out, in, w, res), "res overlaps out without being out");
  // The checks it shares with linear_forward fail in its own name.
  Tensor out2 = device_empty(dt.cd, {8, 8});
  EXPECT_DEATH(ops::linear_residual_forward(gpu(), out2, in, device_empty(dt.ab, {8, 4, 1}), out2),
               "linear_residual_forward: in \\(8, 4\\) and weight");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearGpu,
                         ::testing::Values(Dtypes{DType::bf16, DType::bf16}, Dtypes{DType::bf16, DType::f32},
                                           Dtypes{DType::f32, DType::f32}),
                         [](const auto& info) { return dtypes_name(info.param); });

}  // namespace
}  // namespace dapo::test
