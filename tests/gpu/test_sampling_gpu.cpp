// Token sampling on the GPU beyond the comparison with the CPU
// (test_backend_ops_sampling.cpp has that for many rows and parameter sets,
// the untruncated sampler's edge rows, logit_rows, the shard ops and the
// device Philox draw): the same bits on a rerun and without scratch, zero
// rows, the non-finite flag, a 200k-draw chi-square test against the
// (truncated) softmax, and the tp shard ops (composed on one GPU) against
// the unsharded op.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "dapo/core/rng.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/sampling_select.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"
#include "gpu/tp_sampling_emulation.h"
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

// The op's bits do not depend on the run or on its scratch: two runs and
// one without scratch (the untruncated sampler's one-CTA path instead of
// its two kernels) give the same tokens and log-probs, at the harness's
// rows and parameter sets (test_backend_ops_sampling.cpp compares them
// with the CPU).
TEST_F(SamplingGpu, RerunsAndTheOneCtaPathGiveTheSameBits) {
  auto check = [&](Tensor dl, Tensor ds, Tensor dc, const ops::SamplingParams& p) {
    SCOPED_TRACE(testing::Message() << "B " << dl.size(0) << " V " << dl.size(1) << " " << dtype_name(dl.dtype)
                                    << " T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p);
    std::vector<int32_t> got, got2, got1;
    std::vector<float> lp, lp2, lp1;
    run_gpu(dl, ds, dc, p, got, lp);
    run_gpu(dl, ds, dc, p, got2, lp2);
    run_gpu(dl, ds, dc, p, got1, lp1, true);
    ASSERT_EQ(got, got2) << "tokens differ between two runs";
    ASSERT_EQ(std::memcmp(lp.data(), lp2.data(), lp.size() * sizeof(float)), 0) << "log-probs differ between two runs";
    ASSERT_EQ(got, got1) << "tokens differ without scratch";
    ASSERT_EQ(std::memcmp(lp.data(), lp1.data(), lp.size() * sizeof(float)), 0) << "log-probs differ without scratch";
  };
  for (const auto& [B, V] : shapes::many_rows_shapes()) {
    const shapes::SampleRows r = shapes::many_rows(B, V, random_bf16_exact);
    for (const DType dt : {DType::f32, DType::bf16}) {
      ArenaScope scope(*arena_);
      Tensor dl = upload(r.logits, {B, V}, dt), ds = upload_raw(r.streams, {B}), dc = upload_raw(r.counters, {B});
      for (const ops::SamplingParams& p : shapes::many_rows_params()) {
        ASSERT_NO_FATAL_FAILURE(check(dl, ds, dc, p));
        check_guards();
        guards_.clear();
      }
    }
  }
  for (const int64_t V : shapes::kEdgeRowsVocabs) {
    const shapes::SampleRows r = shapes::edge_rows(V, random_bf16_exact);
    for (const DType dt : {DType::f32, DType::bf16}) {
      ArenaScope scope(*arena_);
      Tensor dl = upload(r.logits, {r.B, V}, dt), ds = upload_raw(r.streams, {r.B}), dc = upload_raw(r.counters, {r.B});
      for (const float temp : {1.0f, 0.7f, 0.0f}) {
        device_->clear_flags();
        ASSERT_NO_FATAL_FAILURE(check(dl, ds, dc, shapes::sampling_params(temp, 0, 1.0f, shapes::kEdgeRowsSeed)));
        EXPECT_EQ(device_->read_flags().non_finite_count, 0) << "-inf logits are weights of 0, not non-finite";
        check_guards();
        guards_.clear();
      }
    }
  }
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

// The CUDA shard ops of tp sampling, composed as rollout::sample_tokens_tp
// does but with the collectives done on the host (tp_sampling_emulation.h):
// tp shards on one GPU.
class SamplingShardsGpu : public SamplingGpu {
 protected:
  // The fixture's device tensors, as sample_tp_shards asks for them.
  struct GpuMem {
    SamplingShardsGpu& t;
    ops::Ctx ctx() const { return t.gpu(); }
    Tensor alloc(DType dt, std::initializer_list<int64_t> dims) { return t.device_empty(dt, dims); }
    template <class T>
    std::vector<T> get(const Tensor& x) {
      return t.get<T>(x);
    }
    template <class T>
    void put(const Tensor& x, const std::vector<T>& v) {
      t.put(x, v);
    }
    Tensor logits(const std::vector<float>& x, int64_t B, int64_t V, DType dt) { return t.upload(x, {B, V}, dt); }
  };
  TpSampled emulate(int tp, const std::vector<float>& x, int64_t B, int64_t V, DType dt, Tensor rows, Tensor streams,
                    Tensor counters, const ops::SamplingParams& p) {
    GpuMem mem{*this};
    return sample_tp_shards(mem, tp, x, B, V, dt, rows, streams, counters, p);
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
          const TpSampled got = emulate(tp, x, B, V, dt, drows, ds, dc, c.p);
          for (int64_t r = 0; r < R; ++r) {
            ASSERT_GE(got.tok[r], 0);
            ASSERT_LT(got.tok[r], V);
            if (got.tok[r] != want[r]) {
              ++differ;
              continue;
            }
            EXPECT_NEAR(got.lp[r], want_lp[r], 2e-6 + 1e-6 * std::fabs(want_lp[r])) << "row " << r;
          }
          sampled += R;
        }
      }
  }
  std::printf("shard ops: %lld of %lld sampled rows differ from the unsharded op\n", (long long)differ,
              (long long)sampled);
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace dapo::test
