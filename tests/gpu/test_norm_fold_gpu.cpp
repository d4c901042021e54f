// The norm folded into the decode step's products (norm_fold.h) on the GPU:
// linear_residual_fold (the skinny epilogue, and the product-then-pass path
// where the skinny kernel cannot take it) against the CPU arithmetic on the
// same bf16 inputs, its row statistics exact for the sums it wrote, the
// residual in place, the same bits twice; the consumers (q/k/v + RoPE +
// cache write, gate/up + SwiGLU, fused and unfused) with the RowNorm against
// the same ops on the rows normed by row_norm_apply; and (DAPO_GPU_PERF=1)
// the folded products against product + residual_rmsnorm in CUDA graphs.
#include "dapo/ops/norm_fold.h"

#include <cmath>
#include <cstring>

#include "dapo/ops/copy.h"
#include "dapo/ops/linear_multi.h"
#include "dapo/ops/linear_swiglu.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/residual_rmsnorm.h"
#include "dapo/ops/rope.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

namespace cd = ops::cuda::detail;

constexpr float kEps = 1e-6f;

float bf16_round(float x) { return to_f32(to_bf16(x)); }

class NormFoldGpu : public GpuTest {
 protected:
  struct Fold {
    Tensor sum, y, ssq;
  };
  // The GPU fold of random bf16 inputs; the inputs kept for the CPU side.
  Fold run_fold(int64_t M, int64_t K, int64_t C, uint32_t seed, bool in_place, std::vector<float>& in,
                std::vector<float>& w, std::vector<float>& res, std::vector<float>& g) {
    in = random_bf16_exact(size_t(M * K), seed, -1, 1);
    w = random_bf16_exact(size_t(C * K), seed + 1, -1.0f / std::sqrt(float(K)), 1.0f / std::sqrt(float(K)));
    res = random_bf16_exact(size_t(M * C), seed + 2, -2, 2);
    g = random_bf16_exact(size_t(C), seed + 3, 0.5f, 1.5f);
    const Tensor tin = upload(in, {M, K}, DType::bf16), tw = upload(w, {C, K}, DType::bf16);
    const Tensor tres = upload(res, {M, C}, DType::bf16), tg = upload(g, {C}, DType::bf16);
    Fold f{in_place ? tres : device_empty(DType::bf16, {M, C}), device_empty(DType::bf16, {M, C}),
           device_empty(DType::f32, {M, ops::norm_fold_parts(C)})};
    ops::linear_residual_fold(gpu(), f.sum, f.y, f.ssq, tin, tw, tres, tg);
    device_->synchronize();
    return f;
  }
};

// Qwen2.5 o_proj and down_proj shapes (skinny epilogue) and a width the
// skinny stores cannot take (70 columns: the product, then one pass), 1 to
// 256 rows.
TEST_F(NormFoldGpu, FoldMatchesTheCpuArithmetic) {
  struct Shape {
    int64_t K, C;
  };
  for (const Shape s : {Shape{896, 896}, Shape{4864, 896}, Shape{8960, 1536}, Shape{64, 70}})
    for (const int64_t M : {1, 5, 32, 33, 100, 128, 256}) {
      SCOPED_TRACE(testing::Message() << "M " << M << " K " << s.K << " C " << s.C);
      std::vector<float> in, w, res, g;
      const Fold f = run_fold(M, s.K, s.C, uint32_t(M * 7 + s.K), M % 2 == 1, in, w, res, g);
      const auto sum = download(f.sum), y = download(f.y), ssq = download(f.ssq);
      std::vector<float> prod(size_t(M * s.C));
      ops::linear_forward(cpu(), tensor_f32(prod.data(), {M, s.C}), tensor_f32(in.data(), {M, s.K}),
                          tensor_f32(w.data(), {s.C, s.K}), Tensor{});
      std::vector<float> want_sum(prod.size()), want_y(prod.size());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < s.C; ++c) {
          const size_t i = size_t(m * s.C + c);
          want_sum[i] = bf16_round(res[i] + bf16_round(prod[i]));
          // y from the GPU's own sum: the CPU product's order differs.
          want_y[i] = bf16_round(sum[i] * g[size_t(c)]);
        }
      expect_close(sum, want_sum, 2e-2, 1e-2, "sum");
      expect_close(y, want_y, 0, 0, "y");
      // Each part's sum of squares of the stored sums.
      const int64_t P = ops::norm_fold_parts(s.C);
      std::vector<float> want_ssq(size_t(P * M));
      for (int64_t p = 0; p < P; ++p)
        for (int64_t m = 0; m < M; ++m) {
          double q = 0;
          for (int64_t c = p * 32; c < std::min<int64_t>(s.C, p * 32 + 32); ++c)
            q += double(sum[size_t(m * s.C + c)]) * sum[size_t(m * s.C + c)];
          want_ssq[size_t(m * P + p)] = float(q);
        }
      expect_close(ssq, want_ssq, 1e-4, 1e-5, "ssq");
    }
}

TEST_F(NormFoldGpu, SameBitsTwice) {
  std::vector<float> in, w, res, g;
  const Fold a = run_fold(128, 4864, 896, 11, false, in, w, res, g);
  const Fold b = run_fold(128, 4864, 896, 11, false, in, w, res, g);
  EXPECT_EQ(bits(a.sum), bits(b.sum));
  EXPECT_EQ(bits(a.y), bits(b.y));
  EXPECT_EQ(bits(a.ssq), bits(b.ssq));
}

// The consumers with the RowNorm against the same ops on the rows that
// row_norm_apply normed: every path (fused at up to 128 rows, unfused above,
// the one-row shapes whose q/k/v has no whole-head tile) within bf16
// rounding of the input rows.
TEST_F(NormFoldGpu, ConsumersMatchTheNormedRows) {
  struct Shape {
    int64_t C, I, Hq, Hkv, D;
  };
  const ops::Ctx ctx = gpu();
  for (const Shape s : {Shape{896, 4864, 14, 2, 64}, Shape{1536, 8960, 12, 2, 128}})
    for (const int64_t M : {1, 8, 64, 128, 256}) {
      SCOPED_TRACE(testing::Message() << "M " << M << " C " << s.C);
      std::vector<float> in, w, res, g;
      const Fold f = run_fold(M, 64, s.C, uint32_t(M + s.C), false, in, w, res, g);
      const ops::RowNorm rn{f.ssq, kEps};
      // The normed rows.
      const Tensor normed = device_empty(DType::bf16, {M, s.C});
      ops::copy(ctx, normed, f.y);
      ops::row_norm_apply(ctx, normed, rn);
      const float wr = 1.0f / std::sqrt(float(s.C));
      // gate/up + SwiGLU.
      const Tensor wg = upload(random_bf16_exact(size_t(s.I * s.C), 21, -wr, wr), {s.I, s.C}, DType::bf16);
      const Tensor wu = upload(random_bf16_exact(size_t(s.I * s.C), 22, -wr, wr), {s.I, s.C}, DType::bf16);
      const Tensor h = device_empty(DType::bf16, {M, s.I}), h_want = device_empty(DType::bf16, {M, s.I});
      const Tensor gate = device_empty(DType::bf16, {M, s.I}), up = device_empty(DType::bf16, {M, s.I});
      const Tensor y1 = device_empty(DType::bf16, {M, s.C});
      ops::copy(ctx, y1, f.y);
      ops::linear_swiglu_forward(ctx, h, gate, up, y1, wg, wu, rn);
      ops::linear_swiglu_forward(ctx, h_want, gate, up, normed, wg, wu);
      expect_close(download(h), download(h_want), 2e-2, 2e-2, "swiglu h");
      // q/k/v + RoPE + cache write.
      const int64_t Nq = s.Hq * s.D, Nkv = s.Hkv * s.D, NB = M / 16 + 2;
      const Tensor wq = upload(random_bf16_exact(size_t(Nq * s.C), 23, -wr, wr), {Nq, s.C}, DType::bf16);
      const Tensor wk = upload(random_bf16_exact(size_t(Nkv * s.C), 24, -wr, wr), {Nkv, s.C}, DType::bf16);
      const Tensor wv = upload(random_bf16_exact(size_t(Nkv * s.C), 25, -wr, wr), {Nkv, s.C}, DType::bf16);
      const Tensor bq = upload(random_bf16_exact(size_t(Nq), 26), {Nq}, DType::bf16);
      std::vector<int32_t> pos(static_cast<size_t>(M)), slots(static_cast<size_t>(M));
      for (int64_t i = 0; i < M; ++i) pos[size_t(i)] = int32_t(i * 37 % 4096), slots[size_t(i)] = int32_t(i);
      const Tensor tpos = upload_raw(pos, {M}), tslots = upload_raw(slots, {M});
      auto run = [&](const Tensor& x, const ops::RowNorm& r) {
        const Tensor q = device_empty(DType::bf16, {M, Nq}), k = device_empty(DType::bf16, {M, Nkv}),
                     v = device_empty(DType::bf16, {M, Nkv});
        const Tensor kc = device_empty(DType::bf16, {NB, 16, s.Hkv, s.D}),
                     vc = device_empty(DType::bf16, {NB, 16, s.Hkv, s.D});
        const ops::LinearSegment segs[] = {{q, wq, bq}, {k, wk, Tensor{}}, {v, wv, Tensor{}}};
        ops::qkv_rope_kv_write(ctx, x, segs, kc, vc, tpos, tslots, ops::kRopeThetaQwen2, r);
        return std::vector<std::vector<float>>{download(q), download(k), download(v)};
      };
      const Tensor y2 = device_empty(DType::bf16, {M, s.C});
      ops::copy(ctx, y2, f.y);
      const auto got = run(y2, rn), want = run(normed, ops::RowNorm{});
      expect_close(got[0], want[0], 2e-2, 2e-2, "q");
      expect_close(got[1], want[1], 2e-2, 2e-2, "k");
      expect_close(got[2], want[2], 2e-2, 2e-2, "v");
    }
}

// us per layer in CUDA graphs (weights rotating through 960 MB, cold L2):
// o_proj and down_proj each with the norm after them, folded or not, and
// the consumers with the RowNorm against without.
TEST_F(NormFoldGpu, DecodePerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  std::printf("{\"device\":\"%s\"}\n", device_->name().c_str());
  Arena big(size_t(3) << 30, Device::cuda, "norm-fold-perf");
  const int64_t pool_elems = int64_t(480) << 20;
  const Tensor pool = big.alloc(DType::bf16, {pool_elems});
  fill_random(*device_, pool, 3, -0.05f, 0.05f);
  struct Model {
    const char* name;
    int64_t C, I, Hkv, D;
  };
  const ops::Ctx ctx = gpu();
  for (const Model m : {Model{"qwen2.5-0.5b", 896, 4864, 2, 64}, Model{"qwen2.5-1.5b", 1536, 8960, 2, 128}})
    for (const int64_t M : {int64_t(1), int64_t(32), int64_t(64), int64_t(128)}) {
      ArenaScope scope(big);
      auto act = [&](int64_t cols) {
        Tensor t = big.alloc(DType::bf16, {M, cols});
        fill_random(*device_, t, 5, -1.0f, 1.0f);
        return t;
      };
      const Tensor attn = act(m.C), hid = act(m.I), x = act(m.C), x_mid = act(m.C), xn = act(m.C), part = act(m.C);
      const Tensor g = big.alloc(DType::bf16, {m.C}), rstd = big.alloc(DType::f32, {M});
      fill_random(*device_, g, 6, 0.5f, 1.5f);
      const Tensor ssq = big.alloc(DType::f32, {M, ops::norm_fold_parts(m.C)});
      auto weight = [&](int call, int64_t rows, int64_t cols) {
        const size_t bytes = size_t(rows * cols) * 2, stride = (bytes + 4095) / 4096 * 4096 + 4096 * 7;
        size_t at = (size_t(call) * stride) % (pool.nbytes() - stride + 1);
        at -= at % 256;
        return Tensor(static_cast<char*>(pool.data) + at, DType::bf16, {rows, cols}, Device::cuda);
      };
      const int calls = 40;
      auto us = [&](auto&& one) { return graph_us_per_call(ctx, calls, [&](int i) { one(i); }); };
      const double o_plain = us([&](int i) {
        ops::linear_forward(ctx, part, attn, weight(i, m.C, m.C), Tensor{});
        ops::residual_rmsnorm_forward(ctx, x_mid, xn, rstd, x, part, g, kEps);
      });
      const double o_fold =
          us([&](int i) { ops::linear_residual_fold(ctx, x_mid, xn, ssq, attn, weight(i, m.C, m.C), x, g); });
      const double down_plain = us([&](int i) {
        ops::linear_forward(ctx, part, hid, weight(i, m.C, m.I), Tensor{});
        ops::residual_rmsnorm_forward(ctx, x, xn, rstd, x_mid, part, g, kEps);
      });
      const double down_fold =
          us([&](int i) { ops::linear_residual_fold(ctx, x, xn, ssq, hid, weight(i, m.C, m.I), x_mid, g); });
      // The consumer's side: gate/up + SwiGLU with and without the row scale.
      const Tensor h = big.alloc(DType::bf16, {M, m.I}), gate = big.alloc(DType::bf16, {M, m.I}),
                   up = big.alloc(DType::bf16, {M, m.I});
      ops::linear_residual_fold(ctx, x_mid, xn, ssq, attn, weight(0, m.C, m.C), x, g);
      const double swiglu_plain =
          us([&](int i) { ops::linear_swiglu_forward(ctx, h, gate, up, xn, weight(i, m.I, m.C), weight(i + 7, m.I, m.C)); });
      const double swiglu_rn = us([&](int i) {
        ops::linear_swiglu_forward(ctx, h, gate, up, xn, weight(i, m.I, m.C), weight(i + 7, m.I, m.C),
                                   ops::RowNorm{ssq, kEps});
      });
      // q/k/v + RoPE + cache write with and without it.
      const int64_t Nkv = m.Hkv * m.D;
      const Tensor q = big.alloc(DType::bf16, {M, m.C}), k = big.alloc(DType::bf16, {M, Nkv}),
                   v = big.alloc(DType::bf16, {M, Nkv}), bias = big.alloc(DType::bf16, {m.C + 2 * Nkv});
      fill_random(*device_, bias, 7);
      const Tensor kc = big.alloc(DType::bf16, {M / 16 + 1, 16, m.Hkv, m.D}),
                   vc = big.alloc(DType::bf16, {M / 16 + 1, 16, m.Hkv, m.D});
      std::vector<int32_t> idx(static_cast<size_t>(M));
      for (int64_t i = 0; i < M; ++i) idx[size_t(i)] = int32_t(i);
      const Tensor pos = upload_raw(idx, {M}), slots = upload_raw(idx, {M});
      auto qkv = [&](int i, const ops::RowNorm& rn) {
        const Tensor w = weight(i, m.C + 2 * Nkv, m.C);
        const ops::LinearSegment segs[] = {{q, w.slice_rows(0, m.C), bias.slice_rows(0, m.C)},
                                           {k, w.slice_rows(m.C, m.C + Nkv), bias.slice_rows(m.C, m.C + Nkv)},
                                           {v, w.slice_rows(m.C + Nkv, m.C + 2 * Nkv), bias.slice_rows(m.C + Nkv, m.C + 2 * Nkv)}};
        ops::qkv_rope_kv_write(ctx, xn, segs, kc, vc, pos, slots, ops::kRopeThetaQwen2, rn);
      };
      const double qkv_plain = us([&](int i) { qkv(i, ops::RowNorm{}); });
      const double qkv_rn = us([&](int i) { qkv(i, ops::RowNorm{ssq, kEps}); });
      std::printf("{\"op\":\"norm_fold\",\"model\":\"%s\",\"M\":%lld,\"o_plus_norm_us\":%.2f,\"o_fold_us\":%.2f,"
                  "\"down_plus_norm_us\":%.2f,\"down_fold_us\":%.2f,\"swiglu_us\":%.2f,\"swiglu_row_norm_us\":%.2f,"
                  "\"qkv_us\":%.2f,\"qkv_row_norm_us\":%.2f}\n",
                  m.name, (long long)M, o_plain, o_fold, down_plain, down_fold, swiglu_plain, swiglu_rn, qkv_plain,
                  qkv_rn);
      std::fflush(stdout);
    }
}

}  // namespace
}  // namespace dapo::test
