// The LM head fused with sampling (ops/lm_head_sample.h) on the GPU beyond
// the comparison with the CPU op (test_backend_ops_sampling.cpp has that at
// every tile shape, under a folded norm and with logit_rows): the same bits
// twice, and the GPU's own head + sample_tokens gives the same tokens
// except where u falls within rounding of a CDF boundary; bad logit rows
// and non-finite logits raise the device flags; a chi-square test of 200k
// draws against the softmax.
#include <cmath>
#include <cstring>
#include <numeric>

#include "dapo/core/rng.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/sampling.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"
#include "ops/sampling_test_util.h"

namespace dapo::test {
namespace {

ops::SamplingParams params(float temperature, uint64_t seed = 91) {
  ops::SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  return p;
}

void make_keys(int64_t R, uint32_t seed, std::vector<int64_t>& streams, std::vector<int64_t>& counters) {
  std::mt19937_64 gen(seed);
  streams.resize(size_t(R));
  counters.resize(size_t(R));
  for (int64_t r = 0; r < R; ++r) {
    streams[size_t(r)] = int64_t(stream_id({gen(), uint64_t(r)}));
    counters[size_t(r)] = int64_t(gen() % 100000);
  }
}

class LmHeadSampleGpu : public GpuTest {
 protected:
  std::vector<int32_t> download_i32(const Tensor& t) {
    std::vector<int32_t> out(size_t(t.numel()));
    device_->synchronize();
    if (!out.empty()) device_->copy_to_host(tensor_i32(out.data(), {t.numel()}), t);
    return out;
  }

  struct Result {
    std::vector<int32_t> tok;
    std::vector<float> lp;
  };

  // The fused op on the device into guarded outputs.
  Result run_fused(Tensor h, Tensor w, Tensor rows, Tensor ds, Tensor dc, int64_t R, const ops::SamplingParams& p,
                   const ops::RowNorm& norm = {}) {
    Tensor t = guarded(DType::i32, {R}), l = guarded(DType::f32, {R});
    ops::lm_head_sample(gpu(), t, l, h, w, rows, ds, dc, p, norm);
    return {download_i32(t), download(l)};
  }
  // The composition on the device: the head into f32 logits, sample_tokens.
  Result run_unfused(Tensor h, Tensor w, Tensor rows, Tensor ds, Tensor dc, int64_t R, const ops::SamplingParams& p) {
    ArenaScope scope(*arena_);
    Tensor logits = arena_->alloc(DType::f32, {h.size(0), w.size(0)});
    ops::linear_forward(gpu(), logits, h, w, Tensor{});
    Tensor t = arena_->alloc(DType::i32, {R}), l = arena_->alloc(DType::f32, {R});
    ops::sample_tokens(gpu(), t, l, logits, rows, ds, dc, p);
    return {download_i32(t), download(l)};
  }

  // Rows whose token differs between a and b; where they agree, the
  // log-probs must be within tol.
  static int64_t compare(const Result& a, const Result& b, int64_t V, double tol, const char* what) {
    int64_t bad = 0;
    EXPECT_EQ(a.tok.size(), b.tok.size());
    for (size_t r = 0; r < a.tok.size(); ++r) {
      EXPECT_GE(a.tok[r], 0) << what << " row " << r;
      EXPECT_LT(a.tok[r], V) << what << " row " << r;
      EXPECT_TRUE(std::isfinite(a.lp[r])) << what << " row " << r;
      if (a.tok[r] != b.tok[r]) {
        ++bad;
        continue;
      }
      EXPECT_NEAR(a.lp[r], b.lp[r], tol + 1e-6 * std::fabs(b.lp[r])) << what << " row " << r;
    }
    return bad;
  }

  // hidden (B, C) and weight (V, C) bf16-exact as the harness makes them
  // (test_backend_ops_sampling.cpp); rows (R) over the B hidden rows, or
  // none (R = B); with `norm`, the rows under a folded norm. The fused op
  // twice: the same bits; without a norm, against the GPU's own head +
  // sample_tokens: the same tokens but where u falls within rounding of a
  // CDF boundary (at most one row of a shape), the log-probs within 2e-5.
  void check_shape(int64_t B, int64_t V, int64_t C, float temperature, float scale, const std::vector<int32_t>& rows,
                   bool norm) {
    SCOPED_TRACE(testing::Message() << "B " << B << " V " << V << " C " << C << " T " << temperature << " norm "
                                    << norm << " rows " << rows.size());
    ArenaScope scope(*arena_);
    const int64_t R = rows.empty() ? B : int64_t(rows.size());
    std::vector<float> h = random_bf16_exact(size_t(B * C), uint32_t(B + 7 * C), -scale, scale);
    std::vector<float> w = random_bf16_exact(size_t(V * C), uint32_t(V + C), -1.0f, 1.0f);
    std::vector<int64_t> streams, counters;
    make_keys(R, uint32_t(R * 3 + 1), streams, counters);
    const ops::SamplingParams p = params(temperature);
    const int64_t parts = ops::norm_fold_parts(C);
    std::vector<float> ssq = random_bf16_exact(size_t(B * parts), uint32_t(B + 5), 0.25f, 4.0f);
    for (float& x : ssq) x *= 32.0f * scale * scale;
    Tensor dh = upload(h, {B, C}, DType::bf16), dw = upload(w, {V, C}, DType::bf16);
    Tensor ds = upload_raw(streams, {R}), dc = upload_raw(counters, {R});
    Tensor drows = rows.empty() ? Tensor{} : upload_raw(rows, {R});
    const ops::RowNorm dnorm = norm ? ops::RowNorm{upload(ssq, {B, parts}), 1e-6f} : ops::RowNorm{};
    const Result got = run_fused(dh, dw, drows, ds, dc, R, p, dnorm);
    const Result again = run_fused(dh, dw, drows, ds, dc, R, p, dnorm);
    ASSERT_EQ(got.tok, again.tok) << "tokens differ between two runs";
    ASSERT_EQ(std::memcmp(got.lp.data(), again.lp.data(), got.lp.size() * sizeof(float)), 0)
        << "log-probs differ between two runs";
    if (!norm) {
      const Result composed = run_unfused(dh, dw, drows, ds, dc, R, p);
      EXPECT_LE(compare(got, composed, V, 2e-5, "fused vs gpu composition"), 1);
    }
    check_guards();
    guards_.clear();  // their memory goes back to the arena with this scope
  }
};

TEST_F(LmHeadSampleGpu, RerunsAreBitIdenticalAndMatchTheComposition) {
  for (const shapes::HeadShape& s : shapes::lm_head_shapes())
    ASSERT_NO_FATAL_FAILURE(check_shape(s.B, s.V, s.C, s.T, s.scale, {}, false));
  // n samples of each prompt's row (the prefill's last rows), rows shared.
  std::vector<int32_t> rows;
  for (int64_t r = 0; r < 4 * 24; ++r) rows.push_back(int32_t(r / 4));
  ASSERT_NO_FATAL_FAILURE(check_shape(24, 2048, 128, 1.0f, 0.4f, rows, false));
}

// Rows under a folded norm (the decode step's model.norm): 64- and 128-row
// tiles, logit_rows, the 0.5B head.
TEST_F(LmHeadSampleGpu, FoldedNormRerunsAreBitIdentical) {
  ASSERT_NO_FATAL_FAILURE(check_shape(128, 151936, 896, 1.0f, 0.08f, {}, true));
  ASSERT_NO_FATAL_FAILURE(check_shape(40, 3001, 128, 0.8f, 0.3f, {}, true));
  ASSERT_NO_FATAL_FAILURE(check_shape(24, 2048, 64, 1.0f, 0.4f, {3, 3, 0, 23, 7}, true));
}

TEST_F(LmHeadSampleGpu, BadRowsAndNonFiniteFlag) {
  const int64_t B = 6, V = 300, C = 64;
  std::vector<float> h = random_bf16_exact(size_t(B * C), 3), w = random_bf16_exact(size_t(V * C), 4);
  h[size_t(2 * C + 5)] = std::numeric_limits<float>::quiet_NaN();  // row 2's logits are all NaN
  const std::vector<int32_t> rows = {0, 2, 7, 1};                     // 7 is out of range
  const int64_t R = int64_t(rows.size());
  std::vector<int64_t> streams, counters;
  make_keys(R, 5, streams, counters);
  device_->clear_flags();
  const Result got = run_fused(upload(h, {B, C}, DType::bf16), upload(w, {V, C}, DType::bf16), upload_raw(rows, {R}),
                               upload_raw(streams, {R}), upload_raw(counters, {R}), R, params(1.0f));
  const ops::DeviceFlags f = device_->read_flags();
  EXPECT_EQ(f.non_finite_count, 1);
  EXPECT_EQ(f.non_finite_row, 1);
  EXPECT_EQ(f.bad_id_count, 1);
  EXPECT_EQ(f.bad_id_row, 2);
  EXPECT_EQ(f.bad_id_value, 7);
  EXPECT_EQ(got.tok[1], 0);
  EXPECT_TRUE(std::isnan(got.lp[1]));
  EXPECT_EQ(got.tok[2], 0);
  EXPECT_TRUE(std::isnan(got.lp[2]));
  EXPECT_TRUE(std::isfinite(got.lp[0]) && std::isfinite(got.lp[3]));
  device_->clear_flags();
  check_guards();
}

// 200k draws (rows of one hidden vector, each with its own counter) against
// softmax(logits / T) of that row, computed on the host in double: the
// chi-square below its 1e-6 upper quantile.
TEST_F(LmHeadSampleGpu, ChiSquareOf200kDraws) {
  const int64_t V = 50, C = 64, N = 200000;
  const std::vector<float> hrow = random_bf16_exact(size_t(C), 31, -1.0f, 1.0f);
  const std::vector<float> w = random_bf16_exact(size_t(V * C), 32, -0.4f, 0.4f);
  std::vector<float> logits(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) {
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += double(hrow[size_t(c)]) * double(w[size_t(v * C + c)]);
    logits[size_t(v)] = float(s);
  }
  std::vector<float> h;
  for (int64_t b = 0; b < N; ++b) h.insert(h.end(), hrow.begin(), hrow.end());
  std::vector<int64_t> streams(static_cast<size_t>(N), int64_t(stream_id({4, 5, 6}))), counters(static_cast<size_t>(N));
  std::iota(counters.begin(), counters.end(), int64_t(0));
  ArenaScope scope(*arena_);
  Tensor dh = upload(h, {N, C}, DType::bf16), dw = upload(w, {V, C}, DType::bf16);
  Tensor ds = upload_raw(streams, {N}), dc = upload_raw(counters, {N});
  for (const float T : {1.0f, 0.6f}) {
    const ops::SamplingParams p = params(T);
    const auto q = expected_distribution(logits.data(), V, p);
    const Result got = run_fused(dh, dw, Tensor{}, ds, dc, N, p);
    const ChiSquare c = chi_square(got.tok, q);
    const double limit = chi_square_quantile_1e6(c.df);
    std::printf("lm_head_sample chi-square T %.1f: %.1f, %d dof (limit %.1f)\n", T, c.stat, c.df, limit);
    EXPECT_EQ(c.outside, 0);
    EXPECT_LT(c.stat, limit);
  }
  check_guards();
}

}  // namespace
}  // namespace dapo::test
