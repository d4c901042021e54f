// Dispatch (src/ops/dispatch.h): every op checks that its tensors live on the
// Ctx's device before the backend touches them, naming the op and the
// argument; tensors without elements and arguments that are not tensors are
// left alone. No GPU is needed: the check runs before any memory access, so
// a host buffer marked Device::cuda never gets read.
#include "src/ops/dispatch.h"

#include <vector>

#include "dapo/ops/attention.h"
#include "dapo/ops/cast.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/rmsnorm.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

// A host buffer that claims to be on the GPU.
Tensor on_cuda(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::f32, dims, Device::cuda);
}

TEST(Dispatch, ArgumentNameSplitsAtTopLevelCommas) {
  EXPECT_EQ(ops::detail::argument_name("out, rstd, in, weight, eps", 1), "out");
  EXPECT_EQ(ops::detail::argument_name("out, rstd, in, weight, eps", 3), "in");
  EXPECT_EQ(ops::detail::argument_name("a, f(b, c), d", 2), "f(b, c)");
  EXPECT_EQ(ops::detail::argument_name("a, f(b, c), d", 3), "d");
  EXPECT_EQ(ops::detail::argument_name("a", 2), "");
}

TEST(DispatchDeathTest, CpuOpRefusesADeviceTensor) {
  std::vector<float> out(6), rstd(2), in(6, 1.0f), w(3, 1.0f);
  // rmsnorm checked its own tensors before; attention, kv_cache_write and
  // cast (each its own way, or not at all) now share the one check.
  EXPECT_EXIT(ops::rmsnorm_forward(test::cpu_ctx(), tensor_f32(out.data(), {2, 3}), tensor_f32(rstd.data(), {2}),
                                   on_cuda(in, {2, 3}), tensor_f32(w.data(), {3}), 1e-6f),
              testing::ExitedWithCode(1), "op rmsnorm_forward: argument 3 \\(in\\) is on cuda, the Ctx runs on cpu");
  std::vector<float> q(8), aout(8), lse(2);
  std::vector<int32_t> cu{0, 2};
  EXPECT_EXIT(ops::attention_forward(test::cpu_ctx(), tensor_f32(aout.data(), {2, 1, 4}), tensor_f32(lse.data(), {1, 2}),
                                     tensor_f32(q.data(), {2, 1, 4}), tensor_f32(q.data(), {2, 1, 4}),
                                     on_cuda(q, {2, 1, 4}), tensor_i32(cu.data(), {2}), 2, 0.5f),
              testing::ExitedWithCode(1), "op attention_forward: argument 5 \\(v\\) is on cuda");
  std::vector<float> cache(16), v_cache(16);
  std::vector<int32_t> slots{0};
  EXPECT_EXIT(ops::kv_cache_write(test::cpu_ctx(), on_cuda(cache, {2, 2, 1, 4}), tensor_f32(v_cache.data(), {2, 2, 1, 4}),
                                  tensor_f32(q.data(), {1, 1, 4}), tensor_f32(q.data(), {1, 1, 4}),
                                  tensor_i32(slots.data(), {1})),
              testing::ExitedWithCode(1), "op kv_cache_write: argument 1 \\(k_cache\\) is on cuda");
  EXPECT_EXIT(ops::cast(test::cpu_ctx(), on_cuda(out, {6}), tensor_f32(in.data(), {6})), testing::ExitedWithCode(1),
              "op cast: argument 1 \\(out\\) is on cuda, the Ctx runs on cpu");
}

TEST(Dispatch, EmptyAndLeftOutTensorsAreNotChecked) {
  std::vector<float> none;
  ops::fill(test::cpu_ctx(), on_cuda(none, {0, 3}), 1.0);  // nothing to read or write
  std::vector<float> out(4), in(4, 1.0f), w(4, 1.0f);
  // Tensor{} (no bias) sits on the default device whatever the Ctx.
  ops::linear_forward(test::cpu_ctx(), tensor_f32(out.data(), {2, 2}), tensor_f32(in.data(), {2, 2}),
                      tensor_f32(w.data(), {2, 2}), Tensor{});
  EXPECT_EQ(out[0], 2.0f);
}

#ifdef DAPO_WITH_CUDA
TEST(DispatchDeathTest, CudaOpRefusesAHostTensor) {
  // Fails before the kernel launch, so no GPU (nor a stream) is needed.
  std::vector<float> v(4);
  ops::Ctx ctx;
  ctx.backend = ops::Backend::cuda;
  EXPECT_EXIT(ops::fill(ctx, tensor_f32(v.data(), {4}), 1.0), testing::ExitedWithCode(1),
              "op fill: argument 1 \\(t\\) is on cpu, the Ctx runs on cuda");
}
#endif

}  // namespace
}  // namespace dapo
