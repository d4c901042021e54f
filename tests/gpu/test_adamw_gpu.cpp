// AdamW on the GPU beyond the comparison with the CPU
// (test_backend_ops_elementwise.cpp): the bf16 copy written in the same pass
// changes nothing else (the state of a step with it has the bits of one
// without), and the gradient is read only; odd sizes, aligned and not.
#include <cstring>

#include "dapo/ops/adamw.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

class AdamwGpu : public GpuTest {
 protected:
  // A device view of n elements `offset` elements into a guarded buffer.
  Tensor guarded_view(DType dtype, int64_t n, int64_t offset) {
    Tensor g = guarded(dtype, {n + offset});
    return Tensor(static_cast<char*>(g.data) + offset * int64_t(dtype_size(dtype)), dtype, {n}, Device::cuda);
  }
  Tensor with(const std::vector<float>& host, int64_t offset) {
    Tensor t = guarded_view(DType::f32, int64_t(host.size()), offset);
    if (!host.empty()) device_->copy_to_device(t, Tensor(const_cast<float*>(host.data()), DType::f32, {t.numel()}));
    return t;
  }
};

TEST_F(AdamwGpu, TheBf16CopyChangesNothingElseAndGradIsReadOnly) {
  for (const int64_t N : {int64_t(1000003), int64_t(4096), int64_t(7), int64_t(0)})
    for (const int64_t offset : {int64_t(0), int64_t(1)}) {
      SCOPED_TRACE(::testing::Message() << "N=" << N << " offset=" << offset);
      const size_t mark = arena_->mark();
      // A state some steps in: weights, first moments of either sign,
      // positive second moments; gradients over 4 decades.
      const auto w = random_bf16_exact(size_t(N), 1, -1, 1), m = random_bf16_exact(size_t(N), 2, -1e-2f, 1e-2f);
      const auto v = random_bf16_exact(size_t(N), 3, 1e-6f, 1e-3f);
      auto g = random_bf16_exact(size_t(N), 4, -2, 2);
      for (int64_t i = 0; i < N; i += 7) g[size_t(i)] *= 1e-4f;
      ops::AdamWParams p;
      p.lr = 1e-3f;
      p.weight_decay = 0.1f;
      p.beta2 = 0.95f;
      p.grad_scale = 0.37f;
      p.step = 4;
      Tensor dw = with(w, offset), dm = with(m, offset), dv = with(v, offset), dg = with(g, offset);
      Tensor db = guarded_view(DType::bf16, N, offset);
      Tensor dw2 = with(w, offset), dm2 = with(m, offset), dv2 = with(v, offset);
      ops::adamw_step(gpu(), dw, dg, dm, dv, db, p);
      ops::adamw_step(gpu(), dw2, dg, dm2, dv2, Tensor{}, p);
      EXPECT_TRUE(bits(dw) == bits(dw2)) << "param";
      EXPECT_TRUE(bits(dm) == bits(dm2)) << "exp_avg";
      EXPECT_TRUE(bits(dv) == bits(dv2)) << "exp_avg_sq";
      EXPECT_EQ(download(dg), g) << "grad is read only";
      check_guards();
      guards_.clear();
      arena_->reset(mark);
    }
}

}  // namespace
}  // namespace dapo::test
