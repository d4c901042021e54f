// The fused gate/up products + SwiGLU on the GPU beyond the comparison with
// the CPU (test_backend_ops_gemm.cpp has that for every tile, the wide
// kernel and the op as routed): every tile gives the same bits on a rerun
// and with either ring (one fixed order over K), the wide kernel too, and
// the op's own checks name a wrong shape or an aliased output.
#include "dapo/ops/matmul.h"

#include <cmath>

#include "cuda/cuda_ops.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

namespace cd = ops::cuda::detail;

class LinearSwigluGpu : public GpuTest {
 protected:
  struct Call {
    Tensor in, wg, wu;
  };
  // The harness's inputs: weights scaled so that the products spread over
  // SiLU's curved part.
  Call make(int64_t M, int64_t K, int64_t I, uint32_t seed) {
    const float w = 3.0f / std::sqrt(float(K));
    return {upload(random_bf16_exact(size_t(M * K), seed), {M, K}, DType::bf16),
            upload(random_bf16_exact(size_t(I * K), seed + 1, -w, w), {I, K}, DType::bf16),
            upload(random_bf16_exact(size_t(I * K), seed + 2), {I, K}, DType::bf16)};
  }
};

// Every width at 64 and 128 input rows a CTA, with either ring, on shapes
// with partial tiles (rows past M, columns past I, K not a multiple of 64).
TEST_F(LinearSwigluGpu, EveryTileIsBitIdenticalOnARerunAndWithEitherRing) {
  struct Shape {
    int64_t M, K, I;
  };
  uint32_t seed = 10;
  for (const Shape s : {Shape{1, 64, 40}, Shape{37, 136, 100}, Shape{64, 896, 96}, Shape{100, 200, 300},
                        Shape{128, 896, 200}, Shape{200, 96, 72}}) {
    const size_t mark = arena_->mark();
    const Call c = make(s.M, s.K, s.I, seed += 10);
    for (const int rows : {64, 128})
      for (const int cols : cd::linear_swiglu_widths()) {
        SCOPED_TRACE(testing::Message() << "M " << s.M << " K " << s.K << " I " << s.I << " rows " << rows << " cols "
                                        << cols);
        std::vector<std::vector<unsigned char>> runs;
        for (const bool deep : {false, true})
          for (int run = 0; run < 2; ++run) {
            const cd::SwigluPlan plan{cols, rows, deep};
            Tensor h = guarded(DType::bf16, {s.M, s.I});
            cd::linear_swiglu_fused(gpu(), h, c.in, c.wg, c.wu, &plan);
            runs.push_back(bits(h));
          }
        EXPECT_TRUE(runs[0] == runs[1]) << "a rerun changed the bits";
        EXPECT_TRUE(runs[0] == runs[2]) << "the deep ring changed the bits";
        EXPECT_TRUE(runs[2] == runs[3]) << "a rerun of the deep ring changed the bits";
        check_guards();
        if (HasFailure()) return;
      }
    guards_.clear();
    arena_->reset(mark);
  }
}

TEST_F(LinearSwigluGpu, WideIsBitIdenticalOnARerun) {
  if (!cd::linear_swiglu_wide_preferred(4096, 896, 4864)) GTEST_SKIP() << "no sm_90a build";
  struct Shape {
    int64_t M, K, I;
  };
  uint32_t seed = 500;
  for (const Shape s : {Shape{300, 136, 200}, Shape{129, 64, 131}, Shape{1100, 896, 4864}, Shape{40, 200, 300},
                        Shape{520, 72, 136}}) {
    SCOPED_TRACE(testing::Message() << "M " << s.M << " K " << s.K << " I " << s.I);
    const size_t mark = arena_->mark();
    const Call c = make(s.M, s.K, s.I, seed += 10);
    Tensor h = guarded(DType::bf16, {s.M, s.I});
    cd::linear_swiglu_wide(gpu(), h, c.in, c.wg, c.wu);
    const auto first = bits(h);
    cd::linear_swiglu_wide(gpu(), h, c.in, c.wg, c.wu);
    EXPECT_TRUE(bits(h) == first) << "a rerun changed the bits";
    check_guards();
    guards_.clear();
    arena_->reset(mark);
    if (HasFailure()) return;
  }
}

// The CUDA op's own checks: a wrong shape or an aliased output is named.
TEST_F(LinearSwigluGpu, BadArgumentsAreRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int64_t M = 4, K = 64, I = 40;
  const Call c = make(M, K, I, 321);
  Tensor h = device_empty(DType::bf16, {M, I}), g = device_empty(DType::bf16, {M, I}), u = device_empty(DType::bf16, {M, I});
  EXPECT_DEATH(ops::linear_swiglu_forward(gpu(), device_empty(DType::bf16, {M, I - 8}), g, u, c.in, c.wg, c.wu),
               "h has shape");
  EXPECT_DEATH(ops::linear_swiglu_forward(gpu(), h, g, u, c.in, c.wg, Tensor(c.wu.data, DType::bf16, {I - 8, K}, Device::cuda)),
               "w_up has shape");
  // h on top of the input (a (4, 40) view of in's first elements).
  EXPECT_DEATH(ops::linear_swiglu_forward(gpu(), Tensor(c.in.data, DType::bf16, {M, I}, Device::cuda), g, u, c.in,
                                          c.wg, c.wu),
               "overlaps");
}

}  // namespace
}  // namespace dapo::test
