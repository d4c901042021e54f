// Token sampling on the GPU against the CPU reference: the device Philox
// draw has the host's bits, the same tokens and log-probs for many rows and
// parameter sets (f32 and bf16-exact logits, rows with ties), logit_rows,
// bit-identical reruns, guarded outputs, rows that put the untruncated draw
// at the ends of the row or of its id ranges, a 200k-draw chi-square test
// against the (truncated) softmax, the non-finite flag, the tp shard ops
// (composed on one GPU) against the unsharded op, and the perf case.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "dapo/core/rng.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/sampling_select.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"
#include "mpi/sampling_tp_cases.h"
#include "ops/sampling_test_util.h"

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
  template <class T>
  std::vector<T> get(const Tensor& t) {
    std::vector<T> out(size_t(t.numel()));
    device_->synchronize();
    device_->copy_to_host(Tensor(out.data(), dtype_of<T>(), {t.numel()}),
                          Tensor(t.data, t.dtype, {t.numel()}, Device::cuda));
    return out;
  }
  template <class T>
  void put(const Tensor& t, const std::vector<T>& v) {
    device_->copy_to_device(Tensor(t.data, t.dtype, {t.numel()}, Device::cuda),
                            Tensor(const_cast<T*>(v.data()), dtype_of<T>(), {t.numel()}));
  }
  // Runs the GPU op into fresh guarded outputs; with one_cta, without
  // scratch (untruncated rows: one CTA a row instead of the two kernels).
  void run_gpu(Tensor logits, Tensor streams, Tensor counters, const ops::SamplingParams& p,
               std::vector<int32_t>& tok, std::vector<float>& lp, bool one_cta = false) {
    const int64_t B = logits.size(0);
    Tensor t = guarded(DType::i32, {B}), l = guarded(DType::f32, {B});
    ops::Ctx ctx = gpu();
    if (one_cta) ctx.scratch = nullptr;
    ops::sample_tokens(ctx, t, l, logits, Tensor{}, streams, counters, p);
    device_->synchronize();
    tok = download_i32(t);
    lp = download(l);
  }
  // The CPU op on host logits (B, V) f32 into want, and the GPU op on dl
  // (the same values) into got, twice, and once without scratch (the
  // untruncated sampler's one-CTA path): all three must give the same bits,
  // every token must be an id in [0, V) with a finite log-prob, and where
  // the tokens agree so must the log-probs. bad: the rows whose token
  // differs from the CPU's. Call it through ASSERT_NO_FATAL_FAILURE.
  void run_against_cpu(std::vector<float>& logits, int64_t B, int64_t V, Tensor dl, std::vector<int64_t>& streams,
                       std::vector<int64_t>& counters, Tensor ds, Tensor dc, const ops::SamplingParams& p,
                       std::vector<int32_t>& want, std::vector<int32_t>& got, int64_t& bad) {
    want.assign(size_t(B), 0);
    std::vector<float> want_lp(static_cast<size_t>(B));
    ops::sample_tokens(cpu(), tensor_i32(want.data(), {B}), tensor_f32(want_lp.data(), {B}),
                       tensor_f32(logits.data(), {B, V}), Tensor{}, tensor_i64(streams.data(), {B}),
                       tensor_i64(counters.data(), {B}), p);
    std::vector<int32_t> got2, got1;
    std::vector<float> lp, lp2, lp1;
    run_gpu(dl, ds, dc, p, got, lp);
    run_gpu(dl, ds, dc, p, got2, lp2);
    run_gpu(dl, ds, dc, p, got1, lp1, true);
    ASSERT_EQ(got, got2) << "tokens differ between two runs";
    ASSERT_EQ(std::memcmp(lp.data(), lp2.data(), lp.size() * sizeof(float)), 0) << "log-probs differ between two runs";
    ASSERT_EQ(got, got1) << "tokens differ without scratch";
    ASSERT_EQ(std::memcmp(lp.data(), lp1.data(), lp.size() * sizeof(float)), 0) << "log-probs differ without scratch";
    bad = 0;
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
  for (const Shape sh : {Shape{256, 1000}, Shape{128, 151936}, Shape{7, 3}}) {
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
            std::vector<int32_t> want, got;
            int64_t bad = 0;
            ASSERT_NO_FATAL_FAILURE(run_against_cpu(logits, B, V, dl, streams, counters, ds, dc, p, want, got, bad));
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

// Without top-k/top-p the CUDA op reads the row once in 32 contiguous id
// ranges (sampling.h) and walks only the range the draw falls in. Rows that
// put the draw at the ends: one huge logit at id 0 or V - 1, the mass in the
// last ids, only the last id finite, -inf logits (weight 0, no flag: at id
// 0, scattered, and trailing, so that the walk ends on zero weights), a
// second half whose weights underflow in float (-200) or only in double
// (-120, nonzero range masses of float-zero weights), huge logits on both
// sides of every range boundary; draws u picked near 0 and near 1 for half
// of the rows. Odd V gives rows at every alignment. The rows with one huge
// or one finite logit must agree with the CPU op; the others up to the
// rounding slivers.
TEST_F(SamplingGpu, UntruncatedRowEdgesMatchCpu) {
  int64_t sampled_rows = 0, disagreements = 0;
  for (const int64_t V : {int64_t(151936), int64_t(4753), int64_t(33)}) {
    const int64_t B = 128;
    ArenaScope scope(*arena_);
    const int64_t S = ((V + 31) / 32 + 7) / 8 * 8;  // sampling.cu's range size
    const float ninf = -std::numeric_limits<float>::infinity();
    std::vector<float> logits = random_bf16_exact(size_t(B * V), 17 + uint32_t(V), -4, 4);
    std::vector<int> kind(B);
    for (int64_t b = 0; b < B; ++b) {
      float* row = logits.data() + b * V;
      kind[size_t(b)] = int(b % 12);
      switch (kind[size_t(b)]) {
        case 1: row[0] = 40; break;
        case 2: row[V - 1] = 40; break;
        case 3:
          for (int64_t v = std::max<int64_t>(0, V - 8); v < V; ++v) row[v] = 12;
          break;
        case 4:
          for (int64_t v = std::max<int64_t>(0, V - 3); v < V; ++v) row[v] = 30;
          break;
        case 5:
          for (int64_t v = 0; v < V - 1; ++v) row[v] = ninf;
          row[V - 1] = 0;
          break;
        case 6:
          for (int64_t v = 0; v < V; v += 97) row[v] = ninf;
          for (int64_t v = std::max<int64_t>(1, V - 5); v < V; ++v) row[v] = ninf;
          break;
        case 7: std::fill(row, row + V, 0.0f); break;
        case 8:
          for (int64_t k = 1; k * S <= V; ++k) {
            row[k * S - 1] = 20;
            if (k * S < V) row[k * S] = 20;
          }
          break;
        case 9:
          for (int64_t v = V / 2; v < V; ++v) row[v] = -200;
          break;
        case 10:
          for (int64_t v = 0; v < V / 2; ++v) row[v] = -120;
          break;
        case 11:
          for (int64_t v = 0; v < V; ++v) row[v] *= 8;
          break;
        default: break;
      }
    }
    // Keys: rows b % 4 == 0 get the largest u of 2^16 counters, b % 4 == 1
    // the smallest; the others random.
    const ops::SamplingParams base = params(1.0f, 0, 1.0f, 991);
    std::vector<int64_t> streams, counters;
    make_keys(B, 29 + uint32_t(V), streams, counters);
    for (int64_t b = 0; b < B; b += 4)
      for (const int64_t bb : {b, b + 1}) {
        int64_t best = 0;
        float best_u = bb == b ? -1.0f : 2.0f;
        for (int64_t c = 0; c < (int64_t(1) << 16); ++c) {
          const float u = uniform_float(philox_draw(base.seed, uint64_t(streams[bb]), uint64_t(c)).v[0]);
          if (bb == b ? u > best_u : u < best_u) {
            best_u = u;
            best = c;
          }
        }
        counters[bb] = best;
      }
    Tensor ds = upload_raw(streams, {B}), dc = upload_raw(counters, {B});
    for (const DType dt : {DType::f32, DType::bf16}) {
      Tensor dl = upload(logits, {B, V}, dt);
      for (const float temp : {1.0f, 0.7f, 0.0f}) {
        const auto p = params(temp, 0, 1.0f, base.seed);
        SCOPED_TRACE(testing::Message() << "V " << V << " " << dtype_name(dt) << " T " << temp);
        device_->clear_flags();
        std::vector<int32_t> want, got;
        int64_t bad = 0;
        ASSERT_NO_FATAL_FAILURE(run_against_cpu(logits, B, V, dl, streams, counters, ds, dc, p, want, got, bad));
        EXPECT_EQ(device_->read_flags().non_finite_count, 0) << "-inf logits are weights of 0, not non-finite";
        for (int64_t b = 0; b < B; ++b) {
          const int k = kind[size_t(b)];
          if (temp == 0.0f || k == 1 || k == 2 || k == 5) {
            ASSERT_EQ(got[b], want[b]) << "row " << b << " (kind " << k << ")";
          }
        }
        if (temp != 0.0f) {
          sampled_rows += B;
          disagreements += bad;
        }
      }
      check_guards();
    }
  }
  std::printf("untruncated edge rows: %lld of %lld sampled rows differ from the CPU\n", (long long)disagreements,
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
  // Greedy, top-p, and neither (the one-pass kernel).
  for (const auto& p : {params(0.0f, 0, 0.9f), params(1.0f, 0, 0.9f), params(1.0f, 0, 1.0f)}) {
    SCOPED_TRACE(testing::Message() << "T " << p.temperature << " top_p " << p.top_p);
    device_->clear_flags();
    std::vector<int32_t> tok;
    std::vector<float> lp;
    run_gpu(upload(logits, {B, V}), upload_raw(streams, {B}), upload_raw(counters, {B}), p, tok, lp);
    const ops::DeviceFlags f = device_->read_flags();
    EXPECT_EQ(f.non_finite_count, 1);
    EXPECT_EQ(f.non_finite_row, 1);
    EXPECT_EQ(tok[1], 0);
    EXPECT_TRUE(std::isnan(lp[1]));
    EXPECT_TRUE(std::isfinite(lp[0]) && std::isfinite(lp[2]));
  }
  device_->clear_flags();
  check_guards();
}

// 200k draws of one row of 64 logits (each with its own counter, fixed
// seed: deterministic) against the truncated, renormalised softmax, with
// temperature != 1, top-k, top-p and both: chi-square below its 1e-6 upper
// quantile, nothing drawn outside the kept set, and the same tokens when
// run again (tests/ops runs the same statistic on the CPU op).
TEST_F(SamplingGpu, ChiSquareOf200kDraws) {
  const int64_t V = 64, N = 200000;
  const std::vector<float> row = random_bf16_exact(V, 21, -2.5f, 2.5f);
  std::vector<float> logits;
  for (int64_t b = 0; b < N; ++b) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<int64_t> streams(N, int64_t(stream_id({1, 2, 3}))), counters(N);
  std::iota(counters.begin(), counters.end(), int64_t(0));
  ArenaScope scope(*arena_);
  Tensor dl = upload(logits, {N, V}), ds = upload_raw(streams, {N}), dc = upload_raw(counters, {N});
  for (const auto& p : chi_square_params()) {
    SCOPED_TRACE(testing::Message() << "T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p);
    const auto q = expected_distribution(row.data(), V, p);
    std::vector<int32_t> tok, tok2;
    std::vector<float> lp, lp2;
    run_gpu(dl, ds, dc, p, tok, lp);
    run_gpu(dl, ds, dc, p, tok2, lp2);
    EXPECT_EQ(tok, tok2) << "not reproducible";
    const ChiSquare c = chi_square(tok, q);
    const double limit = chi_square_quantile_1e6(c.df);
    std::printf("gpu chi-square T %.1f top_k %d top_p %.2f: %.1f, %d dof (limit %.1f)\n", p.temperature, p.top_k,
                p.top_p, c.stat, c.df, limit);
    EXPECT_EQ(c.outside, 0);
    EXPECT_LT(c.stat, limit);
  }
  check_guards();
}

// logit_rows on the GPU: R rows over B logits rows (rows shared), against
// the CPU op with the same index, f32 and bf16, the full vocabulary too.
TEST_F(SamplingGpu, LogitRowsMatchCpu) {
  for (const int64_t V : {int64_t(1000), int64_t(151936)}) {
    const int64_t B = 12;
    const std::vector<float> x = random_bf16_exact(size_t(B * V), 3 + uint32_t(V), -6, 6);
    std::vector<int32_t> rows;
    std::vector<int64_t> streams, counters;
    tp_sampling_rows(B, rows, streams, counters);
    const int64_t R = int64_t(rows.size());
    Tensor drows = upload_raw(rows, {R}), ds = upload_raw(streams, {R}), dc = upload_raw(counters, {R});
    for (const DType dt : {DType::f32, DType::bf16}) {
      Tensor dl = upload(x, {B, V}, dt);
      for (const auto& c : tp_sampling_cases()) {
        if (c.coarse) continue;
        SCOPED_TRACE(testing::Message() << "V " << V << " " << dtype_name(dt) << " " << c.name);
        std::vector<int32_t> want(R), idx = rows;
        std::vector<float> want_lp(R);
        std::vector<float> xc = x;
        ops::sample_tokens(cpu(), tensor_i32(want.data(), {R}), tensor_f32(want_lp.data(), {R}),
                           tensor_f32(xc.data(), {B, V}), tensor_i32(idx.data(), {R}), tensor_i64(streams.data(), {R}),
                           tensor_i64(counters.data(), {R}), c.p);
        Tensor t = guarded(DType::i32, {R}), l = guarded(DType::f32, {R});
        ops::sample_tokens(gpu(), t, l, dl, drows, ds, dc, c.p);
        const auto got = get<int32_t>(t);
        const auto lp = get<float>(l);
        int bad = 0;
        for (int64_t r = 0; r < R; ++r) {
          if (got[r] != want[r]) {
            ++bad;
            continue;
          }
          EXPECT_NEAR(lp[r], want_lp[r], 1e-5 + 1e-6 * std::fabs(want_lp[r])) << "row " << r;
        }
        EXPECT_EQ(bad, 0);
      }
      check_guards();
    }
  }
}

// The CUDA shard ops of tp sampling, composed as rollout::sample_tokens_tp
// does but with the collectives done on the host: tp shards on one GPU.
struct TpResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

class SamplingShardsGpu : public SamplingGpu {
 protected:
  TpResult emulate(int tp, const std::vector<float>& x, int64_t B, int64_t V, DType dt, Tensor rows, Tensor streams,
                   Tensor counters, const ops::SamplingParams& p) {
    namespace sd = ops::sampling_detail;
    const int64_t R = rows.numel(), Vs = V / tp;
    const ops::Ctx ctx = gpu();
    struct Rank {
      Tensor logits, m, sums, kept, ties, sel, hist, tok, lp;
    };
    std::vector<Rank> rk(static_cast<size_t>(tp));
    for (int q = 0; q < tp; ++q) {
      Rank& k = rk[size_t(q)];
      k.logits = upload(tp_shard(x, B, V, tp, q), {B, Vs}, dt);
      k.m = device_empty(DType::f32, {R});
      k.sums = device_empty(DType::i64, {int64_t(tp), R});
      k.kept = device_empty(DType::i64, {int64_t(tp), R});
      k.ties = device_empty(DType::i64, {int64_t(tp), R});
      k.sel = device_empty(DType::i64, {R, sd::kSelectWords});
      k.hist = device_empty(DType::i64, {R, 2, sd::kMaxBins});
      k.tok = device_empty(DType::i32, {R});
      k.lp = device_empty(DType::f32, {R});
    }
    auto block = [&](Tensor g, int q) {
      return Tensor(static_cast<char*>(g.data) + size_t(q * R) * dtype_size(g.dtype), g.dtype, {R}, Device::cuda);
    };
    auto gather = [&](Tensor Rank::*f) {
      std::vector<int64_t> all;
      for (int q = 0; q < tp; ++q) {
        const auto b = get<int64_t>(block(rk[size_t(q)].*f, q));
        all.insert(all.end(), b.begin(), b.end());
      }
      for (auto& k : rk) put(k.*f, all);
    };
    auto reduce = [&](Tensor Rank::*f, auto zero, auto op) {
      using T = decltype(zero);
      std::vector<T> acc = get<T>(rk[0].*f);
      for (int q = 1; q < tp; ++q) {
        const auto v = get<T>(rk[size_t(q)].*f);
        for (size_t i = 0; i < acc.size(); ++i) acc[i] = op(acc[i], v[i]);
      }
      for (auto& k : rk) put(k.*f, acc);
    };
    auto vmax = [](auto a, auto b) { return a > b ? a : b; };
    const float T = p.temperature;
    for (int q = 0; q < tp; ++q) ops::sampling_shard_max(ctx, rk[size_t(q)].m, rk[size_t(q)].logits, rows, T);
    reduce(&Rank::m, 0.0f, vmax);
    for (int q = 0; q < tp; ++q)
      ops::sampling_shard_sum(ctx, block(rk[size_t(q)].sums, q), rk[size_t(q)].logits, rows, rk[size_t(q)].m, T);
    gather(&Rank::sums);
    const bool use_k = p.top_k > 0 && p.top_k < V, use_p = p.top_p < 1.0f;
    ops::SamplingParams pp = p;
    if (T == 0.0f) {
      pp.top_k = 0;
      pp.top_p = 1.0f;
    }
    for (auto& k : rk) ops::sampling_select_begin(ctx, k.sel, pp, 0, V);
    if (T != 0.0f) {
      for (int phase = 0; phase < int(use_k) + int(use_p); ++phase) {
        if (phase == 1)
          for (auto& k : rk) ops::sampling_select_begin(ctx, k.sel, p, 1, V);
        for (int level = 0; level < sd::kLevels; ++level) {
          for (auto& k : rk) ops::sampling_shard_histogram(ctx, k.hist, k.logits, rows, k.m, T, k.sel, level);
          reduce(&Rank::hist, int64_t(0), [](int64_t a, int64_t b) { return a + b; });
          for (auto& k : rk) ops::sampling_descend(ctx, k.sel, k.hist, level, p.top_p);
        }
        for (int q = 0; q < tp; ++q) {
          Rank& k = rk[size_t(q)];
          ops::sampling_shard_tie_count(ctx, block(k.ties, q), k.logits, rows, k.m, T, k.sel);
        }
        gather(&Rank::ties);
        for (int q = 0; q < tp; ++q) {
          Rank& k = rk[size_t(q)];
          ops::sampling_shard_tie_limit(ctx, k.sel, k.ties, q, k.logits, rows, k.m, T);
        }
      }
      for (int q = 0; q < tp; ++q) {
        Rank& k = rk[size_t(q)];
        ops::sampling_shard_kept_mass(ctx, block(k.kept, q), k.logits, rows, k.m, T, k.sel);
      }
      gather(&Rank::kept);
    }
    for (int q = 0; q < tp; ++q) {
      Rank& k = rk[size_t(q)];
      ops::sampling_shard_choose(ctx, k.tok, k.lp, k.logits, rows, k.m, k.sel, k.sums, k.kept, streams, counters, p,
                                 q, int64_t(q) * Vs);
    }
    if (T == 0.0f) reduce(&Rank::tok, int32_t(0), [](int32_t a, int32_t b) { return a < b ? a : b; });
    else reduce(&Rank::tok, int32_t(0), vmax);
    reduce(&Rank::lp, 0.0f, vmax);
    return TpResult{get<int32_t>(rk[0].tok), get<float>(rk[0].lp)};
  }
};

// tp = 1, 2, 4 (shards on one GPU) against the unsharded CUDA op: the same
// tokens (the cut decisions are the same integer histograms; only the
// walk's running sum is formed in another order), log-probs to rounding.
TEST_F(SamplingShardsGpu, ShardOpsMatchTheUnshardedOp) {
  int64_t sampled = 0, differ = 0;
  for (const int64_t V : {int64_t(1000), int64_t(151936)}) {
    ArenaScope scope(*arena_);
    const int64_t B = V > 10000 ? 8 : 24;
    std::vector<int32_t> rows;
    std::vector<int64_t> streams, counters;
    tp_sampling_rows(B, rows, streams, counters);
    const int64_t R = int64_t(rows.size());
    Tensor drows = upload_raw(rows, {R}), ds = upload_raw(streams, {R}), dc = upload_raw(counters, {R});
    for (const DType dt : {DType::f32, DType::bf16})
      for (const auto& c : tp_sampling_cases()) {
        ArenaScope inner(*arena_);
        const std::vector<float> x = tp_sampling_logits(B, V, c.coarse, 40 + uint32_t(V));
        Tensor dl = upload(x, {B, V}, dt);
        Tensor t = device_empty(DType::i32, {R}), l = device_empty(DType::f32, {R});
        ops::sample_tokens(gpu(), t, l, dl, drows, ds, dc, c.p);
        const auto want = get<int32_t>(t);
        const auto want_lp = get<float>(l);
        for (const int tp : {1, 2, 4}) {
          SCOPED_TRACE(testing::Message() << "V " << V << " " << dtype_name(dt) << " " << c.name << " tp " << tp);
          const TpResult got = emulate(tp, x, B, V, dt, drows, ds, dc, c.p);
          for (int64_t r = 0; r < R; ++r) {
            ASSERT_GE(got.tokens[r], 0);
            ASSERT_LT(got.tokens[r], V);
            if (got.tokens[r] != want[r]) {
              ++differ;
              continue;
            }
            EXPECT_NEAR(got.logprobs[r], want_lp[r], 2e-6 + 1e-6 * std::fabs(want_lp[r])) << "row " << r;
          }
          sampled += R;
        }
      }
  }
  std::printf("shard ops: %lld of %lld sampled rows differ from the unsharded op\n", (long long)differ,
              (long long)sampled);
  EXPECT_EQ(differ, 0);
}

TEST_F(SamplingGpu, SamplingPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  Arena big(size_t(1) << 30, Device::cuda, "perf");
  const int64_t V = 151936;
  struct Case {
    const char* name;
    ops::SamplingParams p;
  };
  const Case cases[] = {{"T1", params(1.0f, 0, 1.0f)},
                        {"greedy", params(0.0f, 0, 1.0f)},
                        {"T0.7_topk20", params(0.7f, 20, 1.0f)},
                        {"T0.7_topk1000", params(0.7f, 1000, 1.0f)},
                        {"T0.7_topp0.9", params(0.7f, 0, 0.9f)},
                        {"T0.7_topp0.95", params(0.7f, 0, 0.95f)},
                        {"T0.7_topk20_topp0.9", params(0.7f, 20, 0.9f)},
                        {"T0.7_topk1000_topp0.95", params(0.7f, 1000, 0.95f)}};
  ops::Ctx one_cta = ctx;  // the untruncated sampler's one CTA a row (no scratch)
  one_cta.scratch = nullptr;
  for (const int64_t B : {int64_t(1), int64_t(8), int64_t(128), int64_t(512)})
    for (const DType dt : {DType::f32, DType::bf16})
      for (const float spread : {8.0f, 20.0f}) {  // logits uniform in [-spread, spread)
        if (B == 512 && (dt == DType::f32 || spread != 8.0f)) continue;
        if (B < 128 && (dt == DType::bf16 || spread != 8.0f)) continue;
        ArenaScope scope(big);
        Tensor logits = big.alloc(dt, {B, V});
        fill_random(*device_, logits, 1, -spread, spread);
        std::vector<int64_t> streams, counters;
        make_keys(B, 2, streams, counters);
        Tensor ds = big.alloc(DType::i64, {B}), dc = big.alloc(DType::i64, {B});
        device_->copy_to_device(ds, tensor_i64(streams.data(), {B}));
        device_->copy_to_device(dc, tensor_i64(counters.data(), {B}));
        Tensor tok = big.alloc(DType::i32, {B}), lp = big.alloc(DType::f32, {B});
        for (const Case& c : cases) {
          if (B < 128 && (c.p.top_k > 0 || c.p.top_p < 1.0f)) continue;  // T1 and greedy only
          const double ms =
              time_ms(ctx.stream, [&] { ops::sample_tokens(ctx, tok, lp, logits, Tensor{}, ds, dc, c.p); }, 20);
          print_perf(std::string("sample_tokens_") + c.name,
                     "B=" + std::to_string(B) + ",V=" + std::to_string(V) + ",logits~U(+-" +
                         std::to_string(int(spread)) + ")",
                     dtype_name(dt), ms, double(B) * double(V) * double(dtype_size(dt)));
        }
        const double ms = time_ms(
            ctx.stream, [&] { ops::sample_tokens(one_cta, tok, lp, logits, Tensor{}, ds, dc, cases[0].p); }, 20);
        print_perf("sample_tokens_T1_one_cta",
                   "B=" + std::to_string(B) + ",V=" + std::to_string(V) + ",logits~U(+-" +
                       std::to_string(int(spread)) + ")",
                   dtype_name(dt), ms, double(B) * double(V) * double(dtype_size(dt)));
      }
}

}  // namespace
}  // namespace dapo::test
