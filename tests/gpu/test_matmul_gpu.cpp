// matmul / linear on the GPU (cuBLASLt) beyond the comparison with the CPU
// (test_backend_ops_gemm.cpp): the shape where split-K is likeliest gives
// the same bits on a rerun (weight and bias gradients accumulated from the
// same values, the forward with a bias), and linear_residual_forward
// refuses a res that overlaps out without being out; under
// Ctx::batch_invariant a row's bits do not depend on the rows around it.
#include "dapo/ops/matmul.h"

#include <algorithm>

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

// rollout.exact_logprobs: under Ctx::batch_invariant (one cuBLASLt
// algorithm for every row count, gemm_plan_cache.cuh) each row of a
// product of 1 to 5,000 rows, taken anywhere in the input, is bit for bit
// its row in the product of all 6,144: Qwen2.5-1.5B's projections (q with
// its bias, k, gate, down, o with the residual) and a slice of its LM head
// into f32; linear_forward_multi's q/k/v segments too. The default routes
// are counted for the record only (the kernels for few rows sum otherwise).
class BatchInvariantGpu : public GpuTest {};

TEST_F(BatchInvariantGpu, RowsDoNotDependOnTheBatch) {
  ops::Ctx ctx = gpu();
  ctx.batch_invariant = true;
  struct Shape {
    const char* name;
    int64_t K, O;
    bool bias, residual;
    DType out;
  };
  const Shape shapes[] = {{"q", 1536, 1536, true, false, DType::bf16},    {"k", 1536, 256, true, false, DType::bf16},
                          {"gate", 1536, 8960, false, false, DType::bf16}, {"down", 8960, 1536, false, false, DType::bf16},
                          {"o", 1536, 1536, false, true, DType::bf16},    {"lm_head", 1536, 4096, false, false, DType::f32}};
  const int64_t N = 6144;
  const std::pair<int64_t, int64_t> slices[] = {{0, 1},    {17, 18},   {0, 2},    {5, 8},      {100, 108},
                                               {0, 31},   {64, 128},  {7, 264},  {1000, 2000}, {6143, 6144},
                                               {144, 5144}};
  uint32_t seed = 700;
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(sh.name);
    ArenaScope scope(*arena_);
    const size_t esz = dtype_size(sh.out);
    Tensor in = upload(random_bf16_exact(size_t(N * sh.K), seed++), {N, sh.K}, DType::bf16);
    Tensor w = upload(random_bf16_exact(size_t(sh.O * sh.K), seed++, -0.05f, 0.05f), {sh.O, sh.K}, DType::bf16);
    Tensor bias = sh.bias ? upload(random_bf16_exact(size_t(sh.O), seed++), {sh.O}, sh.out) : Tensor{};
    Tensor res = sh.residual ? upload(random_bf16_exact(size_t(N * sh.O), seed++), {N, sh.O}, sh.out) : Tensor{};
    Tensor all = device_empty(sh.out, {N, sh.O});
    auto run = [&](const ops::Ctx& c, Tensor out, int64_t r0, int64_t r1) {
      const Tensor x = in.slice_rows(r0, r1);
      if (sh.residual)
        ops::linear_residual_forward(c, out, x, w, res.slice_rows(r0, r1));
      else
        ops::linear_forward(c, out, x, w, bias);
    };
    run(ctx, all, 0, N);
    const std::vector<unsigned char> want = bits(all);
    int64_t default_differs = 0;
    for (const auto& [r0, r1] : slices) {
      const int64_t n = r1 - r0;
      Tensor part = device_empty(sh.out, {n, sh.O});
      run(ctx, part, r0, r1);
      const std::vector<unsigned char> got = bits(part);
      const size_t row = size_t(sh.O) * esz;
      ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin() + size_t(r0) * row))
          << "rows " << r0 << ".." << r1 << " alone differ from the same rows among " << N;
      run(gpu(), part, r0, r1);
      const std::vector<unsigned char> plain = bits(part);
      default_differs += !std::equal(plain.begin(), plain.end(), want.begin() + size_t(r0) * row);
    }
    std::printf("[ info ] %s: the default routes differ from the invariant one in %lld of %zu slices\n", sh.name,
                static_cast<long long>(default_differs), std::size(slices));
  }
  // q, k, v as segments of linear_forward_multi: each segment's rows as
  // linear_forward gives them among all rows.
  ArenaScope scope(*arena_);
  const int64_t K = 1536;
  Tensor in = upload(random_bf16_exact(size_t(N * K), seed++), {N, K}, DType::bf16);
  std::vector<Tensor> ws, bs, alls;
  for (const int64_t O : {int64_t(1536), int64_t(256), int64_t(256)}) {
    ws.push_back(upload(random_bf16_exact(size_t(O * K), seed++, -0.05f, 0.05f), {O, K}, DType::bf16));
    bs.push_back(upload(random_bf16_exact(size_t(O), seed++), {O}, DType::bf16));
    alls.push_back(device_empty(DType::bf16, {N, O}));
    ops::linear_forward(ctx, alls.back(), in, ws.back(), bs.back());
  }
  for (const int64_t n : {int64_t(1), int64_t(3), int64_t(8), int64_t(100)}) {
    std::vector<ops::LinearSegment> segs;
    for (size_t i = 0; i < ws.size(); ++i)
      segs.push_back({device_empty(DType::bf16, {n, ws[i].shape[0]}), ws[i], bs[i]});
    ops::linear_forward_multi(ctx, in.slice_rows(0, n), segs);
    for (size_t i = 0; i < ws.size(); ++i) {
      const std::vector<unsigned char> got = bits(segs[i].out), want = bits(alls[i].slice_rows(0, n));
      EXPECT_TRUE(got == want) << "segment " << i << " of " << n << " rows";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearGpu,
                         ::testing::Values(Dtypes{DType::bf16, DType::bf16}, Dtypes{DType::bf16, DType::f32},
                                           Dtypes{DType::f32, DType::f32}),
                         [](const auto& info) { return dtypes_name(info.param); });

}  // namespace
}  // namespace dapo::test
