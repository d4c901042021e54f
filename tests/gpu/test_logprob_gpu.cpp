// Log-prob + entropy on the GPU (bf16 and f32 logits) against the CPU op:
// the single-shard forward, the three vocab-parallel passes (whole and on
// two shards combined on the host, as the all-reduces would), the backward
// with either upstream gradient absent and in place, bit-determinism, the
// device flags for NaN / inf logits and bad targets, and the perf case.
#include "dapo/ops/logprob.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "dapo/ops/cast.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  int64_t N, V, vocab_start;
  float inv_t;
  float range;  // logits uniform in [-range, range]
  bool dlogprob, dentropy;
  DType dtype;
  bool masked = false;  // some logits -inf (never a target)
};

std::string describe(const Case& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "N=%lld V=%lld start=%lld inv_t=%.4f range=%g dlp=%d dent=%d %s%s", (long long)c.N,
                (long long)c.V, (long long)c.vocab_start, c.inv_t, c.range, c.dlogprob, c.dentropy,
                dtype_name(c.dtype), c.masked ? " masked" : "");
  return buf;
}

bool is_masked(int64_t v) { return v % 97 == 5; }

std::vector<int32_t> make_targets(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(size_t(c.N));
  for (auto& x : t) {
    int64_t local;
    do local = int64_t(gen() % uint32_t(c.V));
    while (c.masked && is_masked(local));
    x = int32_t(c.vocab_start + local);
  }
  return t;
}

// Bits of two host copies equal (NaN included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

class LogprobGpu : public GpuTest {
 protected:
  struct Fwd {
    std::vector<float> logprob, entropy, lse;
  };

  static std::vector<float> make_logits(const Case& c, uint32_t seed) {
    auto x = random_bf16_exact(size_t(c.N * c.V), seed, -c.range, c.range);
    if (c.masked)
      for (int64_t i = 0; i < c.N * c.V; ++i)
        if (is_masked(i % c.V)) x[size_t(i)] = -kInf;
    return x;
  }

  static Tensor host(std::vector<float>& v, std::initializer_list<int64_t> dims) { return tensor_f32(v.data(), dims); }

  Fwd cpu_forward(std::vector<float>& logits, std::vector<int32_t>& targets, const Case& c) {
    Fwd f{std::vector<float>(c.N), std::vector<float>(c.N), std::vector<float>(c.N)};
    ops::logprob_entropy_forward(cpu(), host(f.logprob, {c.N}), host(f.entropy, {c.N}), host(f.lse, {c.N}),
                                 host(logits, {c.N, c.V}), tensor_i32(targets.data(), {c.N}), c.vocab_start, c.inv_t);
    return f;
  }

  Fwd gpu_forward(Tensor logits, Tensor targets, const Case& c) {
    Tensor lp = guarded(DType::f32, {c.N}), ent = guarded(DType::f32, {c.N}), lse = guarded(DType::f32, {c.N});
    ops::logprob_entropy_forward(gpu(), lp, ent, lse, logits, targets, c.vocab_start, c.inv_t);
    return {download(lp), download(ent), download(lse)};
  }

  // Passes 1-3 on one shard holding the whole vocabulary (no all-reduce needed).
  Fwd gpu_three_pass(Tensor logits, Tensor targets, const Case& c) {
    Tensor row_max = guarded(DType::f32, {c.N}), sums = guarded(DType::f32, {c.N, 3});
    Tensor lp = guarded(DType::f32, {c.N}), ent = guarded(DType::f32, {c.N}), lse = guarded(DType::f32, {c.N});
    ops::logits_row_max(gpu(), row_max, logits, c.inv_t);
    ops::logits_partial_sums(gpu(), sums, logits, targets, row_max, c.vocab_start, c.inv_t);
    ops::logprob_entropy_finish(gpu(), lp, ent, lse, sums, row_max);
    return {download(lp), download(ent), download(lse)};
  }

  void expect_no_flags(const char* what) {
    const ops::DeviceFlags f = device_->read_flags();
    EXPECT_EQ(f.bad_id_count, 0) << what << ": bad id at row " << f.bad_id_row << " id " << f.bad_id_value;
    EXPECT_EQ(f.non_finite_count, 0) << what << ": non-finite at row " << f.non_finite_row;
  }

  void run_case(const Case& c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    const size_t mark = arena_->mark();
    auto logits = make_logits(c, seed);
    auto targets = make_targets(c, seed + 1);
    auto glp = random_bf16_exact(size_t(c.N), seed + 2, -1, 1);
    auto gent = random_bf16_exact(size_t(c.N), seed + 3, -1, 1);

    // CPU reference: forward, then the backward from its lse / entropy.
    Fwd want = cpu_forward(logits, targets, c);
    std::vector<float> want_dx(size_t(c.N * c.V));
    ops::logprob_entropy_backward(cpu(), host(want_dx, {c.N, c.V}), c.dlogprob ? host(glp, {c.N}) : Tensor{},
                                  c.dentropy ? host(gent, {c.N}) : Tensor{}, host(logits, {c.N, c.V}),
                                  tensor_i32(targets.data(), {c.N}), host(want.lse, {c.N}), host(want.entropy, {c.N}),
                                  c.vocab_start, c.inv_t);

    device_->clear_flags();
    Tensor x = upload(logits, {c.N, c.V}, c.dtype);
    Tensor t = upload_raw(targets, {c.N});
    const Fwd got = gpu_forward(x, t, c);
    const double ftol = 1e-4, frtol = 1e-5;  // fp32 chunk sums against the CPU's double sums
    expect_close(got.logprob, want.logprob, ftol, frtol, "logprob");
    expect_close(got.entropy, want.entropy, ftol, frtol, "entropy");
    expect_close(got.lse, want.lse, ftol, frtol, "lse");
    const Fwd again = gpu_forward(x, t, c);
    EXPECT_TRUE(same_bits(got.logprob, again.logprob) && same_bits(got.entropy, again.entropy) &&
                same_bits(got.lse, again.lse))
        << "forward not bit-deterministic";
    const Fwd three = gpu_three_pass(x, t, c);
    expect_close(three.logprob, want.logprob, ftol, frtol, "3-pass logprob");
    expect_close(three.entropy, want.entropy, ftol, frtol, "3-pass entropy");
    expect_close(three.lse, want.lse, ftol, frtol, "3-pass lse");

    // Backward from the CPU's lse / entropy, so that only the kernel differs.
    Tensor d_lse = upload(want.lse, {c.N}), d_ent = upload(want.entropy, {c.N});
    Tensor d_glp = c.dlogprob ? upload(glp, {c.N}) : Tensor{};
    Tensor d_gent = c.dentropy ? upload(gent, {c.N}) : Tensor{};
    Tensor dx = guarded(c.dtype, {c.N, c.V});
    ops::logprob_entropy_backward(gpu(), dx, d_glp, d_gent, x, t, d_lse, d_ent, c.vocab_start, c.inv_t);
    const auto got_dx = download(dx);
    // bf16 output: rounding is 2^-9 relative; f32: exp2 approximation and FMA.
    const double rtol = c.dtype == DType::bf16 ? 8e-3 : 1e-5;
    expect_close(got_dx, want_dx, 5e-6, rtol, "dlogits");  // atol: cancellation of O(10) terms near p = 1
    ops::logprob_entropy_backward(gpu(), dx, d_glp, d_gent, x, t, d_lse, d_ent, c.vocab_start, c.inv_t);
    EXPECT_TRUE(same_bits(got_dx, download(dx))) << "backward not bit-deterministic";
    // In place: dlogits is the logits buffer (a copy of it).
    if (c.N > 0) {
      Tensor inplace = device_empty(c.dtype, {c.N, c.V});
      ops::cast(gpu(), inplace, x);
      ops::logprob_entropy_backward(gpu(), inplace, d_glp, d_gent, inplace, t, d_lse, d_ent, c.vocab_start, c.inv_t);
      EXPECT_TRUE(same_bits(got_dx, download(inplace))) << "in-place backward differs";
    }
    expect_no_flags("clean inputs");
    check_guards();
    std::printf("[logprob] %s: max|d| logprob %.3g entropy %.3g lse %.3g (3-pass %.3g %.3g) dlogits %.3g\n",
                describe(c).c_str(), max_abs_diff(got.logprob, want.logprob),
                max_abs_diff(got.entropy, want.entropy), max_abs_diff(got.lse, want.lse),
                max_abs_diff(three.logprob, want.logprob), max_abs_diff(three.entropy, want.entropy),
                max_abs_diff(got_dx, want_dx));
    guards_.clear();
    arena_->reset(mark);
  }
};

TEST_F(LogprobGpu, MatchesCpuOverShapesDtypesAndGradients) {
  const float t07 = 1.0f / 0.7f;
  const Case cases[] = {
      {0, 1000, 0, 1.0f, 5, true, true, DType::bf16},
      {1, 151936, 0, 1.0f, 5, true, true, DType::bf16},
      {37, 1000, 500, t07, 5, true, false, DType::f32, true},
      {37, 1000, 500, t07, 30, false, true, DType::bf16},
      {37, 151936, 0, t07, 30, true, true, DType::bf16},
      {37, 75968, 75968, 1.0f, 5, true, false, DType::bf16, true},
      {1024, 1000, 0, 1.0f, 30, true, true, DType::bf16},
      {1024, 75968, 75968, t07, 5, true, true, DType::bf16},
      {37, 1001, 3, 1.0f, 5, true, true, DType::bf16, true},  // odd V: the unaligned path
      {5, 999, 7, t07, 30, true, true, DType::f32},
      {96, 151936, 0, 1.0f, 30, false, true, DType::f32},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    run_case(c, seed);
    seed += 10;
    if (HasFatalFailure()) return;
  }
}

// The tensor-parallel forward by hand: two shards of the vocabulary, pass 1
// on each, a host max (the MAX all-reduce), pass 2 on each, a host sum (the
// SUM all-reduce), pass 3: the single-shard forward's values. Each shard's
// backward is the full backward's slice, bit for bit.
TEST_F(LogprobGpu, TwoShardsCombinedEqualTheSingleShard) {
  struct Split {
    int64_t N, V, V0;
    float range, inv_t;
  };
  for (const Split s : {Split{37, 151936, 75968, 30, 1.0f}, Split{37, 151936, 75968, 5, 1.0f / 0.7f},
                        Split{37, 1000, 501, 5, 1.0f}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << s.N << " V=" << s.V << " split " << s.V0);
    const size_t mark = arena_->mark();
    const int64_t N = s.N, V = s.V, V0 = s.V0, V1 = V - V0;
    const Case whole{N, V, 0, s.inv_t, s.range, true, true, DType::bf16};
    auto logits = make_logits(whole, 5);
    auto targets = make_targets(whole, 6);
    std::vector<float> a(size_t(N * V0)), b(size_t(N * V1));
    for (int64_t n = 0; n < N; ++n) {
      std::copy_n(logits.begin() + n * V, V0, a.begin() + n * V0);
      std::copy_n(logits.begin() + n * V + V0, V1, b.begin() + n * V1);
    }
    Tensor x = upload(logits, {N, V}, DType::bf16), xa = upload(a, {N, V0}, DType::bf16);
    Tensor xb = upload(b, {N, V1}, DType::bf16), t = upload_raw(targets, {N});
    const Fwd single = gpu_forward(x, t, whole);

    Tensor ma = guarded(DType::f32, {N}), mb = guarded(DType::f32, {N});
    ops::logits_row_max(gpu(), ma, xa, s.inv_t);
    ops::logits_row_max(gpu(), mb, xb, s.inv_t);
    auto m = download(ma);
    const auto mbh = download(mb);
    for (int64_t n = 0; n < N; ++n) m[n] = std::max(m[n], mbh[n]);
    Tensor gm = upload(m, {N});
    Tensor sa = guarded(DType::f32, {N, 3}), sb = guarded(DType::f32, {N, 3});
    ops::logits_partial_sums(gpu(), sa, xa, t, gm, 0, s.inv_t);
    ops::logits_partial_sums(gpu(), sb, xb, t, gm, V0, s.inv_t);
    auto sums = download(sa);
    const auto sbh = download(sb);
    for (int64_t i = 0; i < N * 3; ++i) sums[i] += sbh[i];
    Tensor gs = upload(sums, {N, 3});
    Tensor lp = guarded(DType::f32, {N}), ent = guarded(DType::f32, {N}), lse = guarded(DType::f32, {N});
    ops::logprob_entropy_finish(gpu(), lp, ent, lse, gs, gm);
    expect_close(download(lp), single.logprob, 2e-5, 1e-6, "sharded logprob");
    expect_close(download(ent), single.entropy, 2e-5, 1e-6, "sharded entropy");
    expect_close(download(lse), single.lse, 2e-5, 1e-6, "sharded lse");
    const Fwd want = cpu_forward(logits, targets, whole);
    expect_close(download(lp), want.logprob, 1e-4, 1e-5, "sharded logprob vs cpu");

    auto glp = random_bf16_exact(size_t(N), 7), gent = random_bf16_exact(size_t(N), 8);
    Tensor g1 = upload(glp, {N}), g2 = upload(gent, {N});
    Tensor l = upload(single.lse, {N}), h = upload(single.entropy, {N});
    Tensor dx = guarded(DType::bf16, {N, V}), dxa = guarded(DType::bf16, {N, V0}), dxb = guarded(DType::bf16, {N, V1});
    ops::logprob_entropy_backward(gpu(), dx, g1, g2, x, t, l, h, 0, s.inv_t);
    ops::logprob_entropy_backward(gpu(), dxa, g1, g2, xa, t, l, h, 0, s.inv_t);
    ops::logprob_entropy_backward(gpu(), dxb, g1, g2, xb, t, l, h, V0, s.inv_t);
    const auto full = download(dx), pa = download(dxa), pb = download(dxb);
    size_t diff = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < V; ++v) {
        const float want_v = full[n * V + v];
        const float got_v = v < V0 ? pa[n * V0 + v] : pb[n * V1 + v - V0];
        diff += std::memcmp(&want_v, &got_v, 4) != 0;
      }
    EXPECT_EQ(diff, 0u) << "shard backward differs from the full one's slice";
    expect_no_flags("clean sharded inputs");
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
}

TEST_F(LogprobGpu, FlagsNonFiniteLogitsAndBadTargets) {
  const int64_t N = 6, V = 20000;
  const Case c{N, V, 100, 1.0f, 5, true, true, DType::bf16};
  auto logits = make_logits(c, 11);
  auto targets = make_targets(c, 12);
  Tensor lp = guarded(DType::f32, {N}), ent = guarded(DType::f32, {N}), lse = guarded(DType::f32, {N});
  Tensor row_max = guarded(DType::f32, {N}), sums = guarded(DType::f32, {N, 3});

  // A NaN logit in row 2 (in the second chunk), +inf in row 4.
  auto bad = logits;
  bad[2 * V + 17000] = std::numeric_limits<float>::quiet_NaN();
  bad[4 * V + 3] = kInf;
  Tensor xb = upload(bad, {N, V}, DType::bf16), t = upload_raw(targets, {N});
  device_->clear_flags();
  ops::logprob_entropy_forward(gpu(), lp, ent, lse, xb, t, c.vocab_start, c.inv_t);
  ops::DeviceFlags f = device_->read_flags();
  EXPECT_EQ(f.non_finite_count, 2);
  EXPECT_EQ(f.non_finite_site, int32_t(ops::FlagSite::logprob));
  EXPECT_TRUE(f.non_finite_row == 2 || f.non_finite_row == 4) << f.non_finite_row;
  EXPECT_EQ(f.bad_id_count, 0);
  const auto lph = download(lp);
  EXPECT_TRUE(std::isnan(lph[2]));
  EXPECT_TRUE(std::isfinite(lph[0]) && std::isfinite(lph[1]) && std::isfinite(lph[3]));

  device_->clear_flags();
  ops::logits_row_max(gpu(), row_max, xb, c.inv_t);
  f = device_->read_flags();
  EXPECT_EQ(f.non_finite_count, 1) << "pass 1 sees the +inf";
  EXPECT_EQ(f.non_finite_row, 4);
  ops::logits_partial_sums(gpu(), sums, xb, t, row_max, c.vocab_start, c.inv_t);
  device_->clear_flags();
  ops::logprob_entropy_finish(gpu(), lp, ent, lse, sums, row_max);
  f = device_->read_flags();
  EXPECT_EQ(f.non_finite_count, 2) << "pass 3 sees the NaN and the inf";

  // A negative target in row 3, a target past the shard in row 5.
  auto bad_t = targets;
  bad_t[3] = -5;
  bad_t[5] = int32_t(c.vocab_start + V);
  Tensor x = upload(logits, {N, V}, DType::bf16), tb = upload_raw(bad_t, {N});
  device_->clear_flags();
  ops::logprob_entropy_forward(gpu(), lp, ent, lse, x, tb, c.vocab_start, c.inv_t);
  f = device_->read_flags();
  EXPECT_EQ(f.bad_id_count, 2);
  EXPECT_EQ(f.bad_id_site, int32_t(ops::FlagSite::logprob));
  EXPECT_TRUE((f.bad_id_row == 3 && f.bad_id_value == -5) || (f.bad_id_row == 5 && f.bad_id_value == c.vocab_start + V))
      << f.bad_id_row << " " << f.bad_id_value;
  EXPECT_EQ(f.non_finite_count, 0);
  const auto lpt = download(lp);
  EXPECT_TRUE(std::isnan(lpt[3]) && std::isnan(lpt[5]) && std::isfinite(lpt[0]));

  device_->clear_flags();
  ops::logits_row_max(gpu(), row_max, x, c.inv_t);
  ops::logits_partial_sums(gpu(), sums, x, tb, row_max, c.vocab_start, c.inv_t);
  f = device_->read_flags();
  EXPECT_EQ(f.bad_id_count, 1) << "pass 2: only the negative one (another shard may hold the other)";
  EXPECT_EQ(f.bad_id_row, 3);

  device_->clear_flags();
  Tensor dx = guarded(DType::bf16, {N, V});
  ops::logprob_entropy_backward(gpu(), dx, upload(std::vector<float>(N, 1.0f), {N}), Tensor{}, x, tb, lse, ent,
                                c.vocab_start, c.inv_t);
  f = device_->read_flags();
  EXPECT_EQ(f.bad_id_count, 1) << "backward: the negative target";
  EXPECT_EQ(f.bad_id_value, -5);
  device_->clear_flags();
  check_guards();
}

// ---- perf (DAPO_GPU_PERF=1) ----


TEST_F(LogprobGpu, Perf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const int64_t N = 4096, V = 151936;  // Qwen2.5's vocabulary, 4096 tokens
  Arena big(size_t(N * V) * 2 * 2 + (size_t(64) << 20), Device::cuda, "logprob-perf");
  Tensor x = big.alloc(DType::bf16, {N, V}), dx = big.alloc(DType::bf16, {N, V});
  // Random logits (never time zeros): one random block repeated over the buffer.
  const int64_t block = int64_t(1) << 23;
  Tensor src = upload(random_bf16_exact(size_t(block), 3, -8, 8), {block}, DType::bf16);
  Tensor flat = x.reshape({N * V});
  for (int64_t i = 0; i < N * V; i += block) {
    const int64_t len = std::min(block, N * V - i);
    Tensor dst(static_cast<bf16*>(flat.data) + i, DType::bf16, {len}, Device::cuda);
    Tensor s(src.data, DType::bf16, {len}, Device::cuda);
    ops::cast(gpu(), dst, s);
  }
  const Case c{N, V, 0, 1.0f / 0.7f, 8, true, true, DType::bf16};
  Tensor t = upload_raw(make_targets(c, 4), {N});
  Tensor lp = device_empty(DType::f32, {N}), ent = device_empty(DType::f32, {N}), lse = device_empty(DType::f32, {N});
  Tensor row_max = device_empty(DType::f32, {N}), sums = device_empty(DType::f32, {N, 3});
  Tensor g1 = upload(random_bf16_exact(size_t(N), 5), {N}), g2 = upload(random_bf16_exact(size_t(N), 6), {N});
  const auto stream = static_cast<cudaStream_t>(gpu().stream);
  const double bytes = double(N) * double(V) * 2;
  const std::string shape = "N=4096,V=151936,bf16";

  const double fwd = median_ms(stream, [&] { ops::logprob_entropy_forward(gpu(), lp, ent, lse, x, t, 0, c.inv_t); });
  print_perf("logprob_entropy_forward", shape, fwd, bytes);
  const double three = median_ms(stream, [&] {
    ops::logits_row_max(gpu(), row_max, x, c.inv_t);
    ops::logits_partial_sums(gpu(), sums, x, t, row_max, 0, c.inv_t);
    ops::logprob_entropy_finish(gpu(), lp, ent, lse, sums, row_max);
  });
  print_perf("logprob_three_pass", shape, three, 2 * bytes);
  ops::logprob_entropy_forward(gpu(), lp, ent, lse, x, t, 0, c.inv_t);
  const double bwd = median_ms(stream, [&] {
    ops::logprob_entropy_backward(gpu(), dx, g1, g2, x, t, lse, ent, 0, c.inv_t);
  });
  print_perf("logprob_entropy_backward", shape, bwd, 2 * bytes);
  const double bwd_inplace = median_ms(stream, [&] {
    ops::logprob_entropy_backward(gpu(), x, g1, g2, x, t, lse, ent, 0, c.inv_t);
  });
  print_perf("logprob_entropy_backward_inplace", shape, bwd_inplace, 2 * bytes);
  const double copy = median_ms(stream, [&] { ops::cast(gpu(), dx, x); });
  print_perf("copy_d2d_reference", shape, copy, 2 * bytes);
  expect_no_flags("perf inputs");
}

}  // namespace
}  // namespace dapo::test
