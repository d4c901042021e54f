// The norm folded into the decode step's products (norm_fold.h) on the GPU,
// beyond the comparison with the CPU (test_backend_ops_norm.cpp has that for
// linear_residual_fold and row_norm_apply): the fold gives the same bits
// twice; and the consumers (q/k/v + RoPE + cache write, gate/up + SwiGLU,
// fused and unfused) with the RowNorm against the same ops on the rows
// normed by row_norm_apply.
#include "dapo/ops/norm_fold.h"

#include <cmath>
#include <cstring>

#include "dapo/ops/copy.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

constexpr float kEps = 1e-6f;

class NormFoldGpu : public GpuTest {
 protected:
  struct Fold {
    Tensor sum, y, ssq;
  };
  // The GPU fold of random bf16 inputs (returned in the vectors).
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

}  // namespace
}  // namespace dapo::test
