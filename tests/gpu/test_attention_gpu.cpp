// Causal GQA attention over packed sequences on the GPU beyond the
// comparison with the CPU (test_backend_ops_attention.cpp): the backward
// gives the same bits on a rerun (it feeds the optimizer; no atomics) at
// the harness's shapes, and an empty batch writes nothing (guards).
#include "dapo/ops/attention.h"

#include <algorithm>
#include <cmath>

#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

TEST_F(GpuTest, AttentionBackwardIsBitIdentical) {
  for (const shapes::AttnShape& s : shapes::attention_shapes()) {
    std::vector<int32_t> cu = {0};
    for (int len : s.lens) cu.push_back(cu.back() + len);
    const int64_t T = cu.back(), Hq = s.Hq, Hkv = s.Hkv, D = s.D, B = int64_t(s.lens.size());
    SCOPED_TRACE(testing::Message() << "T " << T << " B " << B << " Hq " << Hq << " Hkv " << Hkv << " D " << D);
    const size_t mark = arena_->mark();
    const int64_t max_len = s.lens.empty() ? 0 : *std::max_element(s.lens.begin(), s.lens.end());
    const float scale = 1.0f / std::sqrt(float(D));
    Tensor q = upload(random_bf16_exact(size_t(T * Hq * D), s.seed, -1.5f, 1.5f), {T, Hq, D}, DType::bf16);
    Tensor k = upload(random_bf16_exact(size_t(T * Hkv * D), s.seed + 1, -1.5f, 1.5f), {T, Hkv, D}, DType::bf16);
    Tensor v = upload(random_bf16_exact(size_t(T * Hkv * D), s.seed + 2), {T, Hkv, D}, DType::bf16);
    Tensor dout = upload(random_bf16_exact(size_t(T * Hq * D), s.seed + 3), {T, Hq, D}, DType::bf16);
    Tensor gcu = upload_raw(cu, {B + 1});
    Tensor out = device_empty(DType::bf16, {T, Hq, D}), lse = device_empty(DType::f32, {Hq, T});
    ops::attention_forward(gpu(), out, lse, q, k, v, gcu, max_len, scale);
    std::vector<std::vector<unsigned char>> runs[3];
    for (int run = 0; run < 2; ++run) {
      Tensor dq = guarded(DType::bf16, {T, Hq, D}), dk = guarded(DType::bf16, {T, Hkv, D}),
             dv = guarded(DType::bf16, {T, Hkv, D});
      ops::attention_backward(gpu(), dq, dk, dv, dout, q, k, v, out, lse, gcu, max_len, scale);
      runs[0].push_back(bits(dq));
      runs[1].push_back(bits(dk));
      runs[2].push_back(bits(dv));
    }
    EXPECT_TRUE(runs[0][0] == runs[0][1]) << "dq differs between two runs";
    EXPECT_TRUE(runs[1][0] == runs[1][1]) << "dk differs between two runs";
    EXPECT_TRUE(runs[2][0] == runs[2][1]) << "dv differs between two runs";
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
}

TEST_F(GpuTest, AttentionEmptyBatchIsANoOp) {
  for (const std::vector<int32_t>& cu_host : {std::vector<int32_t>{0}, std::vector<int32_t>{0, 0, 0}}) {
    Tensor q = device_empty(DType::bf16, {0, 4, 64}), k = device_empty(DType::bf16, {0, 2, 64});
    Tensor v = device_empty(DType::bf16, {0, 2, 64}), dout = device_empty(DType::bf16, {0, 4, 64});
    Tensor cu = upload_raw(cu_host, {int64_t(cu_host.size())});
    Tensor out = guarded(DType::bf16, {0, 4, 64}), lse = guarded(DType::f32, {4, 0});
    Tensor dq = guarded(DType::bf16, {0, 4, 64}), dk = guarded(DType::bf16, {0, 2, 64}),
           dv = guarded(DType::bf16, {0, 2, 64});
    ops::attention_forward(gpu(), out, lse, q, k, v, cu, 0, 0.125f);
    ops::attention_backward(gpu(), dq, dk, dv, dout, q, k, v, out, lse, cu, 0, 0.125f);
  }
  check_guards();
}

}  // namespace
}  // namespace dapo::test
