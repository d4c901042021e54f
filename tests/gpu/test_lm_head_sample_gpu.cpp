// The LM head fused with sampling (ops/lm_head_sample.h) on the GPU against
// the CPU op (the head into f32 logits, then sample_tokens) on the same
// bf16-exact values, and against the GPU's own head + sample_tokens: the same
// tokens except where u falls within rounding of a CDF boundary, the same
// log-probs where the tokens agree, the same bits twice; every tile shape
// (64 and 128 input rows, 128 and 192 weight rows, several m-tiles, K not
// a multiple of 64, V not a multiple of the tile or the part, a large
// vocabulary), a folded norm of the rows, logit_rows with shared and bad
// rows, the non-finite flag, a chi-square test of 200k draws, and the perf
// case against the composition it replaces.
#include <cmath>
#include <cstring>
#include <numeric>

#include "dapo/core/rng.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/sampling.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"
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

  // hidden (B, C) and weight (V, C) bf16-exact, the logits spread by
  // `scale`; the fused op against the CPU op and the GPU composition. Rows
  // (R) over the B hidden rows, or none (R = B).
  // With `norm`, the rows are under a folded norm (random sums of squares:
  // rstd between ~0.5 and ~2), against the CPU op under the same norm.
  void check_shape(int64_t B, int64_t V, int64_t C, float temperature, float scale, const std::vector<int32_t>& rows,
                   int64_t& sampled, int64_t& disagreements, bool norm = false) {
    SCOPED_TRACE(testing::Message() << "B " << B << " V " << V << " C " << C << " T " << temperature << " norm "
                                    << norm);
    ArenaScope scope(*arena_);
    const int64_t R = rows.empty() ? B : int64_t(rows.size());
    std::vector<float> h = random_bf16_exact(size_t(B * C), uint32_t(B + 7 * C), -scale, scale);
    std::vector<float> w = random_bf16_exact(size_t(V * C), uint32_t(V + C), -1.0f, 1.0f);
    std::vector<int64_t> streams, counters;
    make_keys(R, uint32_t(R * 3 + 1), streams, counters);
    const ops::SamplingParams p = params(temperature);

    const int64_t parts = ops::norm_fold_parts(C);
    std::vector<float> ssq = random_bf16_exact(size_t(B * parts), uint32_t(B + 5), 0.25f, 4.0f);
    for (float& x : ssq) x *= 32.0f * scale * scale;  // a part of 32 columns of values ~scale
    std::vector<int32_t> rows_host = rows;
    Result want{std::vector<int32_t>(size_t(R)), std::vector<float>(size_t(R))};
    const float eps = 1e-6f;
    ops::lm_head_sample(cpu(), tensor_i32(want.tok.data(), {R}), tensor_f32(want.lp.data(), {R}),
                        tensor_f32(h.data(), {B, C}), tensor_f32(w.data(), {V, C}),
                        rows.empty() ? Tensor{} : tensor_i32(rows_host.data(), {R}), tensor_i64(streams.data(), {R}),
                        tensor_i64(counters.data(), {R}), p,
                        norm ? ops::RowNorm{tensor_f32(ssq.data(), {B, parts}), eps} : ops::RowNorm{});

    Tensor dh = upload(h, {B, C}, DType::bf16), dw = upload(w, {V, C}, DType::bf16);
    Tensor ds = upload_raw(streams, {R}), dc = upload_raw(counters, {R});
    Tensor drows = rows.empty() ? Tensor{} : upload_raw(rows, {R});
    const ops::RowNorm dnorm = norm ? ops::RowNorm{upload(ssq, {B, parts}), eps} : ops::RowNorm{};
    const Result got = run_fused(dh, dw, drows, ds, dc, R, p, dnorm);
    const Result again = run_fused(dh, dw, drows, ds, dc, R, p, dnorm);
    ASSERT_EQ(got.tok, again.tok) << "tokens differ between two runs";
    ASSERT_EQ(std::memcmp(got.lp.data(), again.lp.data(), got.lp.size() * sizeof(float)), 0)
        << "log-probs differ between two runs";
    // Under the norm the rows are rescaled to unit RMS and the logits grow
    // to ~20: the fp32 sums' rounding grows with them.
    const int64_t bad_cpu = compare(got, want, V, norm ? 1e-4 : 2e-5, "fused vs cpu");
    int64_t bad_gpu = 0;
    if (!norm) {
      const Result composed = run_unfused(dh, dw, drows, ds, dc, R, p);
      bad_gpu = compare(got, composed, V, 2e-5, "fused vs gpu composition");
    }
    sampled += R;
    disagreements += bad_cpu;
    // Boundary rows are rare (u within ~1e-6 of a CDF boundary, relative):
    // never more than one in a shape's rows here.
    EXPECT_LE(bad_cpu, 1);
    EXPECT_LE(bad_gpu, 1);
    check_guards();
    guards_.clear();  // their memory goes back to the arena with this scope
  }
};

TEST_F(LmHeadSampleGpu, MatchesCpuOnEveryTileShape) {
  int64_t sampled = 0, disagreements = 0;
  struct Shape {
    int64_t B, V, C;
    float T, scale;
  };
  // 0.5B's head at a decode step; 64- and 128-row tiles; two, three and
  // five m-tiles; K with a tail past the last 64; V with a partial tile and
  // a partial part; one row; a vocabulary smaller than one tile; a large
  // one (400,000 ids, 2,084 tiles); one 128-row m-tile part full (65, 72,
  // 96 rows) with 9, 14 (a tail) and 16 k-blocks.
  for (const Shape s : {Shape{128, 151936, 896, 1.0f, 0.08f}, Shape{72, 5003, 520, 1.0f, 0.2f},
                        Shape{65, 3001, 840, 0.9f, 0.15f}, Shape{96, 3001, 1000, 1.0f, 0.15f},
                        Shape{5, 1000, 64, 1.0f, 0.5f},
                        Shape{64, 4099, 200, 0.7f, 0.2f}, Shape{200, 5003, 128, 1.3f, 0.3f},
                        Shape{300, 3001, 64, 1.0f, 0.5f}, Shape{513, 777, 72, 1.0f, 0.5f}, Shape{1, 20000, 1536, 1.0f, 0.05f},
                        Shape{100, 40, 32, 1.0f, 1.0f}, Shape{3, 400000, 64, 1.0f, 0.5f}})
    ASSERT_NO_FATAL_FAILURE(check_shape(s.B, s.V, s.C, s.T, s.scale, {}, sampled, disagreements));
  std::printf("lm_head_sample: %lld of %lld sampled rows differ from the CPU\n", (long long)disagreements,
              (long long)sampled);
}

// Rows under a folded norm (the decode step's model.norm): 64- and 128-row
// tiles, logit_rows, the 0.5B head.
TEST_F(LmHeadSampleGpu, FoldedNormMatchesCpu) {
  int64_t sampled = 0, disagreements = 0;
  ASSERT_NO_FATAL_FAILURE(check_shape(128, 151936, 896, 1.0f, 0.08f, {}, sampled, disagreements, true));
  ASSERT_NO_FATAL_FAILURE(check_shape(40, 3001, 128, 0.8f, 0.3f, {}, sampled, disagreements, true));
  ASSERT_NO_FATAL_FAILURE(check_shape(24, 2048, 64, 1.0f, 0.4f, {3, 3, 0, 23, 7}, sampled, disagreements, true));
  std::printf("lm_head_sample, folded norm: %lld of %lld sampled rows differ from the CPU\n",
              (long long)disagreements, (long long)sampled);
}

// n samples of each prompt's row (the prefill's last rows), rows shared.
TEST_F(LmHeadSampleGpu, LogitRowsMatchCpu) {
  int64_t sampled = 0, disagreements = 0;
  const int64_t B = 24;
  std::vector<int32_t> rows;
  for (int64_t r = 0; r < 4 * B; ++r) rows.push_back(int32_t(r / 4));
  ASSERT_NO_FATAL_FAILURE(check_shape(B, 2048, 128, 1.0f, 0.4f, rows, sampled, disagreements));
  EXPECT_EQ(disagreements, 0);
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

// The fused op against the head (linear_forward: cuBLASLt at these rows)
// plus sample_tokens, each timed as a CUDA graph of 20 calls, Qwen2.5
// heads (tied embeddings: 0.5B C = 896, 1.5B C = 1536).
TEST_F(LmHeadSampleGpu, Perf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  Arena big(size_t(2) << 30, Device::cuda, "perf");
  const int64_t V = 151936;
  for (const int64_t C : {int64_t(896), int64_t(1536)})
    for (const int64_t B : {int64_t(1), int64_t(32), int64_t(128), int64_t(256)}) {
      ArenaScope scope(big);
      Tensor h = big.alloc(DType::bf16, {B, C}), w = big.alloc(DType::bf16, {V, C});
      fill_random(*device_, h, 1, -0.1f, 0.1f);
      fill_random(*device_, w, 2, -1.0f, 1.0f);
      std::vector<int64_t> streams, counters;
      make_keys(B, 2, streams, counters);
      Tensor ds = big.alloc(DType::i64, {B}), dc = big.alloc(DType::i64, {B});
      device_->copy_to_device(ds, tensor_i64(streams.data(), {B}));
      device_->copy_to_device(dc, tensor_i64(counters.data(), {B}));
      Tensor tok = big.alloc(DType::i32, {B}), lp = big.alloc(DType::f32, {B}), logits = big.alloc(DType::f32, {B, V});
      const ops::SamplingParams p = params(1.0f);
      const double fused = graph_us_per_call(ctx, 20, [&](int) {
        ops::lm_head_sample(ctx, tok, lp, h, w, Tensor{}, ds, dc, p);
      });
      const double composed = graph_us_per_call(ctx, 20, [&](int) {
        ops::linear_forward(ctx, logits, h, w, Tensor{});
        ops::sample_tokens(ctx, tok, lp, logits, Tensor{}, ds, dc, p);
      });
      const double head = graph_us_per_call(ctx, 20, [&](int) { ops::linear_forward(ctx, logits, h, w, Tensor{}); });
      const std::string shape = "B=" + std::to_string(B) + ",V=" + std::to_string(V) + ",C=" + std::to_string(C);
      print_perf("lm_head_sample", shape, fused / 1e3, double(V * C * 2));
      print_perf("lm_head+sample_tokens", shape, composed / 1e3, double(V * C * 2));
      print_perf("lm_head_alone", shape, head / 1e3, double(V * C * 2));
    }
}

}  // namespace
}  // namespace dapo::test
