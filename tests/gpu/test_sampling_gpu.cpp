// Token sampling on the GPU against the CPU reference: the device Philox
// draw has the host's bits, the same tokens and log-probs for many rows and
// parameter sets (f32 and bf16-exact logits, rows with ties), bit-identical
// reruns, guarded outputs, a chi-square test of the draws against the
// (truncated) softmax, the non-finite flag, and the perf case.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "dapo/core/rng.h"
#include "dapo/ops/sampling.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

ops::SamplingParams params(float temperature, int top_k, float top_p, uint64_t seed = 77) {
  ops::SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

class SamplingGpu : public GpuTest {
 protected:
  std::vector<int32_t> download_i32(const Tensor& t) {
    std::vector<int32_t> out(size_t(t.numel()));
    device_->copy_to_host(tensor_i32(out.data(), {t.numel()}), t);
    return out;
  }
  // Runs the GPU op into fresh guarded outputs.
  void run_gpu(Tensor logits, Tensor streams, Tensor counters, const ops::SamplingParams& p,
               std::vector<int32_t>& tok, std::vector<float>& lp) {
    const int64_t B = logits.size(0);
    Tensor t = guarded(DType::i32, {B}), l = guarded(DType::f32, {B});
    ops::sample_tokens(gpu(), t, l, logits, Tensor{}, streams, counters, p);
    device_->synchronize();
    tok = download_i32(t);
    lp = download(l);
  }
};

// Random i64 stream ids and counters (as stream_id and positions would be).
void make_keys(int64_t B, uint32_t seed, std::vector<int64_t>& streams, std::vector<int64_t>& counters) {
  std::mt19937_64 gen(seed);
  streams.resize(B);
  counters.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    streams[b] = int64_t(stream_id({gen(), uint64_t(b)}));
    counters[b] = int64_t(gen() % 100000);
  }
}

TEST_F(SamplingGpu, PhiloxDrawHasHostBits) {
  const int64_t B = 1000;
  std::vector<int64_t> streams, counters;
  make_keys(B, 5, streams, counters);
  counters[0] = -1;  // every bit set in the counter
  streams[1] = std::numeric_limits<int64_t>::min();
  Tensor out = guarded(DType::i32, {B, 4});
  const uint64_t seed = 0x0123456789ABCDEFull;
  ops::cuda::philox_draws(gpu(), out, upload_raw(streams, {B}), upload_raw(counters, {B}), seed);
  device_->synchronize();
  std::vector<int32_t> got = download_i32(Tensor(out.data, DType::i32, {B * 4}, Device::cuda));
  for (int64_t b = 0; b < B; ++b) {
    const U32x4 want = philox_draw(seed, uint64_t(streams[b]), uint64_t(counters[b]));
    for (int j = 0; j < 4; ++j) ASSERT_EQ(uint32_t(got[b * 4 + j]), want.v[j]) << "row " << b << " word " << j;
  }
  check_guards();
}

TEST_F(SamplingGpu, MatchesCpuOnManyRows) {
  struct Shape {
    int64_t B, V;
  };
  int64_t sampled_rows = 0, disagreements = 0;
  for (const Shape sh : {Shape{256, 1000}, Shape{48, 151936}, Shape{7, 3}}) {
    const int64_t B = sh.B, V = sh.V;
    // bf16-exact logits in [-4, 4), each row scaled by 1, 2 or 4 (still
    // bf16-exact): flat to peaked rows. bf16 values give many exact ties;
    // rows 0-2 also tie the max (and near-max) values across several ids.
    std::vector<float> logits = random_bf16_exact(size_t(B * V), 11 + uint32_t(V), -4, 4);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < V; ++v) logits[b * V + v] *= float(1 << (b % 3));
    for (int64_t b = 0; b < std::min<int64_t>(B, 3); ++b) {
      float* row = logits.data() + b * V;
      const float mx = *std::max_element(row, row + V);
      for (int64_t v = V / 3; v < V; v += std::max<int64_t>(1, V / 7)) row[v] = mx;
      row[V - 1] = mx;
    }
    std::vector<int64_t> streams, counters;
    make_keys(B, 3 + uint32_t(V), streams, counters);
    Tensor ds = upload_raw(streams, {B}), dc = upload_raw(counters, {B});

    for (const DType dt : {DType::f32, DType::bf16}) {
      Tensor dl = upload(logits, {B, V}, dt);
      for (const float temp : {0.0f, 0.7f, 1.0f})
        for (const int k : {0, 1, 50})
          for (const float top_p : {1.0f, 0.9f, 0.5f}) {
            if (temp == 0.0f && (k != 0 || top_p != 1.0f)) continue;  // greedy ignores both
            const auto p = params(temp, k, top_p);
            SCOPED_TRACE(testing::Message() << "B " << B << " V " << V << " " << dtype_name(dt) << " T " << temp
                                            << " top_k " << k << " top_p " << top_p);
            std::vector<int32_t> want(B);
            std::vector<float> want_lp(B);
            ops::sample_tokens(cpu(), tensor_i32(want.data(), {B}), tensor_f32(want_lp.data(), {B}),
                               tensor_f32(logits.data(), {B, V}), Tensor{}, tensor_i64(streams.data(), {B}),
                               tensor_i64(counters.data(), {B}), p);
            std::vector<int32_t> got, got2;
            std::vector<float> lp, lp2;
            run_gpu(dl, ds, dc, p, got, lp);
            run_gpu(dl, ds, dc, p, got2, lp2);
            ASSERT_EQ(got, got2) << "tokens differ between two runs";
            ASSERT_EQ(std::memcmp(lp.data(), lp2.data(), lp.size() * sizeof(float)), 0)
                << "log-probs differ between two runs";
            int64_t bad = 0;
            for (int64_t b = 0; b < B; ++b) {
              ASSERT_GE(got[b], 0);
              ASSERT_LT(got[b], V);
              ASSERT_TRUE(std::isfinite(lp[b])) << "row " << b;
              if (got[b] != want[b]) {
                ++bad;
                continue;
              }
              EXPECT_NEAR(lp[b], want_lp[b], 1e-5 + 1e-6 * std::fabs(want_lp[b])) << "row " << b;
            }
            if (temp == 0.0f || k == 1) EXPECT_EQ(bad, 0) << "greedy (or top-1) rows must agree";
            if (temp != 0.0f) {
              sampled_rows += B;
              disagreements += bad;
            }
          }
      check_guards();
    }
  }
  std::printf("sample_tokens: %lld of %lld sampled rows differ from the CPU\n", (long long)disagreements,
              (long long)sampled_rows);
  EXPECT_LE(disagreements, 1 + sampled_rows / 1000);
}

TEST_F(SamplingGpu, ZeroRowsAndNonFiniteFlag) {
  ops::sample_tokens(gpu(), device_empty(DType::i32, {0}), device_empty(DType::f32, {0}),
                     device_empty(DType::f32, {0, 10}), Tensor{}, device_empty(DType::i64, {0}),
                     device_empty(DType::i64, {0}), params(1.0f, 0, 1.0f));
  device_->synchronize();

  const int64_t B = 3, V = 100;
  std::vector<float> logits = random_bf16_exact(size_t(B * V), 9);
  logits[1 * V + 42] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int64_t> streams, counters;
  make_keys(B, 1, streams, counters);
  for (const float temp : {0.0f, 1.0f}) {
    device_->clear_flags();
    std::vector<int32_t> tok;
    std::vector<float> lp;
    run_gpu(upload(logits, {B, V}), upload_raw(streams, {B}), upload_raw(counters, {B}), params(temp, 0, 0.9f),
            tok, lp);
    const ops::DeviceFlags f = device_->read_flags();
    EXPECT_EQ(f.non_finite_count, 1);
    EXPECT_EQ(f.non_finite_row, 1);
    EXPECT_EQ(tok[1], 0);
    EXPECT_TRUE(std::isfinite(lp[0]) && std::isfinite(lp[2]));
  }
  device_->clear_flags();
  check_guards();
}

// The empirical frequencies of many draws from one row (each with its own
// counter) against the distribution the contract defines.
TEST_F(SamplingGpu, ChiSquareAgainstSoftmax) {
  const int64_t V = 16, N = 40000;
  const float temp = 0.8f;
  const std::vector<float> row = random_bf16_exact(V, 21, -2, 2);
  std::vector<float> logits;
  for (int64_t b = 0; b < N; ++b) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<int64_t> streams(N, int64_t(stream_id({1, 2, 3}))), counters(N);
  std::iota(counters.begin(), counters.end(), int64_t(0));
  Tensor dl = upload(logits, {N, V}), ds = upload_raw(streams, {N}), dc = upload_raw(counters, {N});

  // p under softmax(row / temp) in double, and the ids in (p desc, id asc) order.
  std::vector<double> prob(V);
  double mx = -1e30, s = 0;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]) / temp);
  for (int64_t v = 0; v < V; ++v) s += prob[v] = std::exp(double(row[v]) / temp - mx);
  for (auto& x : prob) x /= s;
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });

  struct Case {
    int k;
    float p;
  };
  for (const Case c : {Case{0, 1.0f}, Case{5, 1.0f}, Case{0, 0.7f}, Case{8, 0.8f}}) {
    SCOPED_TRACE(testing::Message() << "top_k " << c.k << " top_p " << c.p);
    int keep = c.k > 0 ? c.k : int(V);
    double mass = 0;
    for (int i = 0; i < keep; ++i) mass += prob[order[i]];
    if (c.p < 1.0f) {
      double cum = 0;
      for (int i = 0; i < keep; ++i) {
        cum += prob[order[i]] / mass;
        if (cum >= c.p) {
          keep = i + 1;
          break;
        }
      }
    }
    std::vector<double> q(V, 0.0);
    double kept = 0;
    for (int i = 0; i < keep; ++i) kept += prob[order[i]];
    for (int i = 0; i < keep; ++i) q[order[i]] = prob[order[i]] / kept;

    std::vector<int32_t> tok;
    std::vector<float> lp;
    run_gpu(dl, ds, dc, params(temp, c.k, c.p, 99), tok, lp);
    std::vector<int64_t> count(V, 0);
    for (const int32_t t : tok) ++count[t];
    double chi2 = 0;
    int df = -1;
    for (int64_t v = 0; v < V; ++v) {
      if (q[v] == 0.0) {
        EXPECT_EQ(count[v], 0) << "token " << v << " is outside the kept set";
        continue;
      }
      const double e = q[v] * double(N);
      chi2 += (double(count[v]) - e) * (double(count[v]) - e) / e;
      ++df;
    }
    std::printf("sample_tokens chi-square: top_k %d top_p %.2f: %.2f with %d degrees of freedom\n", c.k, c.p, chi2,
                df);
    // The 99.9% quantile of chi-square with 15 degrees of freedom is 37.7;
    // fewer degrees of freedom have lower quantiles.
    EXPECT_LT(chi2, 37.7);
  }
  check_guards();
}

TEST_F(SamplingGpu, SamplingPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  Arena big(size_t(1) << 30, Device::cuda, "perf");
  const int64_t V = 151936;
  for (const int64_t B : {int64_t(128), int64_t(512)}) {
    ArenaScope scope(big);
    Tensor logits = big.alloc(DType::bf16, {B, V});
    fill_random(*device_, logits, 1, -8, 8);
    std::vector<int64_t> streams, counters;
    make_keys(B, 2, streams, counters);
    Tensor ds = big.alloc(DType::i64, {B}), dc = big.alloc(DType::i64, {B});
    device_->copy_to_device(ds, tensor_i64(streams.data(), {B}));
    device_->copy_to_device(dc, tensor_i64(counters.data(), {B}));
    Tensor tok = big.alloc(DType::i32, {B}), lp = big.alloc(DType::f32, {B});
    struct Case {
      const char* name;
      ops::SamplingParams p;
    };
    for (const Case c : {Case{"T1", params(1.0f, 0, 1.0f)}, Case{"T1_topk50_topp0.9", params(1.0f, 50, 0.9f)},
                         Case{"T1_topp0.9", params(1.0f, 0, 0.9f)}, Case{"greedy", params(0.0f, 0, 1.0f)}}) {
      const double ms = time_ms(ctx.stream, [&] { ops::sample_tokens(ctx, tok, lp, logits, Tensor{}, ds, dc, c.p); }, 20);
      print_perf(std::string("sample_tokens_") + c.name, "B=" + std::to_string(B) + ",V=" + std::to_string(V),
                 "bf16", ms, double(B) * double(V) * 2.0);
    }
  }
}

}  // namespace
}  // namespace dapo::test
