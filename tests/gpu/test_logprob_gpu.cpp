// Log-prob + entropy on the GPU (bf16 and f32 logits) beyond the comparison
// with the CPU (test_backend_ops_sampling.cpp): the forward and the
// backward give the same bits on a rerun and the backward in place
// (dlogits in the logits' buffer) the bits of a separate one, at the
// harness's cases; two shards combined by hand (the all-reduces on the
// host) give the single-shard forward, and each shard's backward is the
// full backward's slice bit for bit; the device flags for NaN / inf logits
// and bad targets.
#include "dapo/ops/logprob.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "dapo/ops/cast.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<int32_t> make_targets(const shapes::LpCase& c, uint32_t seed) { return shapes::logprob_targets(c, seed); }

class LogprobGpu : public GpuTest {
 protected:
  static std::vector<float> make_logits(const shapes::LpCase& c, uint32_t seed) {
    auto x = random_bf16_exact(size_t(c.N * c.V), seed, -c.range, c.range);
    if (c.masked)
      for (int64_t i = 0; i < c.N * c.V; ++i)
        if (shapes::logprob_masked(i % c.V)) x[size_t(i)] = -kInf;
    return x;
  }
  struct Fwd {
    Tensor logprob, entropy, lse;
  };
  Fwd forward(Tensor logits, Tensor targets, int64_t N, int64_t vocab_start, float inv_t) {
    Fwd f{guarded(DType::f32, {N}), guarded(DType::f32, {N}), guarded(DType::f32, {N})};
    ops::logprob_entropy_forward(gpu(), f.logprob, f.entropy, f.lse, logits, targets, vocab_start, inv_t);
    return f;
  }
  void expect_no_flags(const char* what) {
    const ops::DeviceFlags f = device_->read_flags();
    EXPECT_EQ(f.bad_id_count, 0) << what << ": bad id at row " << f.bad_id_row << " id " << f.bad_id_value;
    EXPECT_EQ(f.non_finite_count, 0) << what << ": non-finite at row " << f.non_finite_row;
  }
};

TEST_F(LogprobGpu, RerunsTheInPlaceAndTheNarrowedBackwardAreBitIdentical) {
  for (const shapes::LpCase& c : shapes::logprob_cases()) {
    SCOPED_TRACE(testing::Message() << "N " << c.N << " V " << c.V << " start " << c.vocab_start << " "
                                    << dtype_name(c.dtype) << (c.masked ? " masked" : ""));
    const size_t mark = arena_->mark();
    device_->clear_flags();
    const auto logits = make_logits(c, c.seed);
    const auto targets = make_targets(c, c.seed + 1);
    Tensor x = upload(logits, {c.N, c.V}, c.dtype), t = upload_raw(targets, {c.N});
    const Fwd a = forward(x, t, c.N, c.vocab_start, c.inv_t), b = forward(x, t, c.N, c.vocab_start, c.inv_t);
    EXPECT_TRUE(bits(a.logprob) == bits(b.logprob) && bits(a.entropy) == bits(b.entropy) && bits(a.lse) == bits(b.lse))
        << "forward not bit-deterministic";
    Tensor glp = c.dlogprob ? upload(random_bf16_exact(size_t(c.N), c.seed + 2), {c.N}) : Tensor{};
    Tensor gent = c.dentropy ? upload(random_bf16_exact(size_t(c.N), c.seed + 3), {c.N}) : Tensor{};
    Tensor dx = guarded(c.dtype, {c.N, c.V});
    ops::logprob_entropy_backward(gpu(), dx, glp, gent, x, t, a.lse, a.entropy, c.vocab_start, c.inv_t);
    const auto first = bits(dx);
    ops::logprob_entropy_backward(gpu(), dx, glp, gent, x, t, a.lse, a.entropy, c.vocab_start, c.inv_t);
    EXPECT_TRUE(bits(dx) == first) << "backward not bit-deterministic";
    // In place: dlogits is the logits buffer (a copy of it).
    if (c.N > 0) {
      Tensor inplace = device_empty(c.dtype, {c.N, c.V});
      ops::cast(gpu(), inplace, x);
      ops::logprob_entropy_backward(gpu(), inplace, glp, gent, inplace, t, a.lse, a.entropy, c.vocab_start, c.inv_t);
      EXPECT_TRUE(bits(inplace) == first) << "in-place backward differs";
    }
    // From f32 logits straight to a bf16 gradient (the trainer's fp32 LM
    // head): the f32 gradient rounded once, on the aligned and the odd-V path.
    if (c.dtype == DType::f32) {
      Tensor narrow = guarded(DType::bf16, {c.N, c.V}), rounded = device_empty(DType::bf16, {c.N, c.V});
      ops::logprob_entropy_backward(gpu(), narrow, glp, gent, x, t, a.lse, a.entropy, c.vocab_start, c.inv_t);
      ops::cast(gpu(), rounded, dx);
      EXPECT_TRUE(bits(narrow) == bits(rounded)) << "bf16 dlogits from f32 logits are not the f32 gradient rounded";
    }
    expect_no_flags("clean inputs");
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
}

// The tensor-parallel forward by hand: two shards of the vocabulary, pass 1
// on each, a host max (the MAX all-reduce), pass 2 on each, a host sum (the
// SUM all-reduce), pass 3: the single-shard forward's values. Each shard's
// backward is the full backward's slice, bit for bit.
TEST_F(LogprobGpu, TwoShardsCombinedEqualTheSingleShard) {
  for (const shapes::LpSplit s : shapes::logprob_splits()) {
    SCOPED_TRACE(::testing::Message() << "N=" << s.N << " V=" << s.V << " split " << s.V0);
    const size_t mark = arena_->mark();
    const int64_t N = s.N, V = s.V, V0 = s.V0, V1 = V - V0;
    const shapes::LpCase whole{N, V, 0, s.inv_t, s.range, true, true, DType::bf16};
    auto logits = make_logits(whole, 5);
    auto targets = make_targets(whole, 6);
    std::vector<float> a(size_t(N * V0)), b(size_t(N * V1));
    for (int64_t n = 0; n < N; ++n) {
      std::copy_n(logits.begin() + n * V, V0, a.begin() + n * V0);
      std::copy_n(logits.begin() + n * V + V0, V1, b.begin() + n * V1);
    }
    Tensor x = upload(logits, {N, V}, DType::bf16), xa = upload(a, {N, V0}, DType::bf16);
    Tensor xb = upload(b, {N, V1}, DType::bf16), t = upload_raw(targets, {N});
    const Fwd single = forward(x, t, N, 0, s.inv_t);
    const auto single_lp = download(single.logprob), single_ent = download(single.entropy),
               single_lse = download(single.lse);

    Tensor ma = guarded(DType::f32, {N}), mb = guarded(DType::f32, {N});
    ops::logits_row_max(gpu(), ma, xa, s.inv_t);
    ops::logits_row_max(gpu(), mb, xb, s.inv_t);
    auto m = download(ma);
    const auto mbh = download(mb);
    for (int64_t n = 0; n < N; ++n) m[size_t(n)] = std::max(m[size_t(n)], mbh[size_t(n)]);
    Tensor gm = upload(m, {N});
    Tensor sa = guarded(DType::f32, {N, 3}), sb = guarded(DType::f32, {N, 3});
    ops::logits_partial_sums(gpu(), sa, xa, t, gm, 0, s.inv_t);
    ops::logits_partial_sums(gpu(), sb, xb, t, gm, V0, s.inv_t);
    auto sums = download(sa);
    const auto sbh = download(sb);
    for (int64_t i = 0; i < N * 3; ++i) sums[size_t(i)] += sbh[size_t(i)];
    Tensor gs = upload(sums, {N, 3});
    Tensor lp = guarded(DType::f32, {N}), ent = guarded(DType::f32, {N}), lse = guarded(DType::f32, {N});
    ops::logprob_entropy_finish(gpu(), lp, ent, lse, gs, gm);
    // The shards' fp32 partial sums added on the host: 2e-5 of the single pass.
    expect_close(download(lp), single_lp, 2e-5, 1e-6, "sharded logprob");
    expect_close(download(ent), single_ent, 2e-5, 1e-6, "sharded entropy");
    expect_close(download(lse), single_lse, 2e-5, 1e-6, "sharded lse");

    Tensor g1 = upload(random_bf16_exact(size_t(N), 7), {N}), g2 = upload(random_bf16_exact(size_t(N), 8), {N});
    Tensor dx = guarded(DType::bf16, {N, V}), dxa = guarded(DType::bf16, {N, V0}), dxb = guarded(DType::bf16, {N, V1});
    ops::logprob_entropy_backward(gpu(), dx, g1, g2, x, t, single.lse, single.entropy, 0, s.inv_t);
    ops::logprob_entropy_backward(gpu(), dxa, g1, g2, xa, t, single.lse, single.entropy, 0, s.inv_t);
    ops::logprob_entropy_backward(gpu(), dxb, g1, g2, xb, t, single.lse, single.entropy, V0, s.inv_t);
    const auto full = download(dx), pa = download(dxa), pb = download(dxb);
    size_t diff = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < V; ++v) {
        const float want_v = full[size_t(n * V + v)];
        const float got_v = v < V0 ? pa[size_t(n * V0 + v)] : pb[size_t(n * V1 + v - V0)];
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
  const shapes::LpCase c{N, V, 100, 1.0f, 5, true, true, DType::bf16};
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

}  // namespace
}  // namespace dapo::test
