// Causal GQA attention over packed sequences: forward and lse against a
// naive per-sequence softmax(q k^T * scale + mask) v in double, backward
// against finite differences, thread-count independence, and long
// sequences in a scratch arena far smaller than T^2.
#include "dapo/ops/attention.h"

#include <omp.h>

#include <cmath>

#include "dapo/core/arena.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

// A packed batch: sequences of the given lengths, concatenated.
struct Packed {
  int64_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 0;
  std::vector<int32_t> cu;  // (B+1)
  std::vector<float> q;     // (T, Hq, D)
  std::vector<float> k, v;  // (T, Hkv, D)

  int64_t B() const { return int64_t(cu.size()) - 1; }
  Tensor tq() { return tensor_f32(q.data(), {T, Hq, D}); }
  Tensor tk() { return tensor_f32(k.data(), {T, Hkv, D}); }
  Tensor tv() { return tensor_f32(v.data(), {T, Hkv, D}); }
  Tensor tcu() { return tensor_i32(cu.data(), {B() + 1}); }
};

Packed make_packed(const std::vector<int>& lens, int64_t Hq, int64_t Hkv, int64_t D, uint32_t seed,
                   float amplitude = 1.5f) {
  Packed p;
  p.Hq = Hq;
  p.Hkv = Hkv;
  p.D = D;
  p.scale = 1.0f / std::sqrt(float(D));
  p.cu = {0};
  for (int len : lens) p.cu.push_back(p.cu.back() + len);
  p.T = p.cu.back();
  // Amplitude > 1 so that softmax rows are far from uniform.
  p.q = test::random_vector(size_t(p.T * Hq * D), seed, -amplitude, amplitude);
  p.k = test::random_vector(size_t(p.T * Hkv * D), seed + 1, -amplitude, amplitude);
  p.v = test::random_vector(size_t(p.T * Hkv * D), seed + 2);
  return p;
}

// Naive attention of query row i, head h, in double: out (D) and lse.
void naive_row(const Packed& p, int64_t i, int64_t h, std::vector<double>& out, double& lse) {
  int64_t b = 0;
  while (p.cu[b + 1] <= i) ++b;
  const int64_t start = p.cu[b], g = h / (p.Hq / p.Hkv), D = p.D;
  std::vector<double> s(size_t(i - start + 1));
  double m = -INFINITY;
  for (int64_t j = start; j <= i; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(p.q[(i * p.Hq + h) * D + d]) * p.k[(j * p.Hkv + g) * D + d];
    s[j - start] = dot * p.scale;
    m = std::max(m, s[j - start]);
  }
  double l = 0;
  for (double& x : s) l += std::exp(x - m);
  out.assign(size_t(D), 0.0);
  for (int64_t j = start; j <= i; ++j) {
    const double w = std::exp(s[j - start] - m) / l;
    for (int64_t d = 0; d < D; ++d) out[d] += w * p.v[(j * p.Hkv + g) * D + d];
  }
  lse = m + std::log(l);
}

struct Result {
  std::vector<float> out, lse;
};

Result forward(const ops::Ctx& ctx, Packed& p) {
  Result r{std::vector<float>(size_t(p.T * p.Hq * p.D), NAN), std::vector<float>(size_t(p.Hq * p.T), NAN)};
  ops::attention_forward(ctx, tensor_f32(r.out.data(), {p.T, p.Hq, p.D}),
                         tensor_f32(r.lse.data(), {p.Hq, p.T}), p.tq(), p.tk(), p.tv(), p.tcu(), p.T, p.scale);
  return r;
}

struct Grads {
  std::vector<float> dq, dk, dv;
};

Grads backward(const ops::Ctx& ctx, Packed& p, Result& r, std::vector<float>& dout) {
  // NaN-filled: the op must overwrite, not accumulate.
  Grads g{std::vector<float>(p.q.size(), NAN), std::vector<float>(p.k.size(), NAN),
          std::vector<float>(p.v.size(), NAN)};
  ops::attention_backward(ctx, tensor_f32(g.dq.data(), {p.T, p.Hq, p.D}),
                          tensor_f32(g.dk.data(), {p.T, p.Hkv, p.D}),
                          tensor_f32(g.dv.data(), {p.T, p.Hkv, p.D}),
                          tensor_f32(dout.data(), {p.T, p.Hq, p.D}), p.tq(), p.tk(), p.tv(),
                          tensor_f32(r.out.data(), {p.T, p.Hq, p.D}),
                          tensor_f32(r.lse.data(), {p.Hq, p.T}), p.tcu(), p.T, p.scale);
  return g;
}

ops::Ctx ctx_with(Arena& scratch) {
  ops::Ctx ctx = test::cpu_ctx();
  ctx.scratch = &scratch;
  return ctx;
}

// Lengths include 1 and an empty sequence; none is a multiple of anything.
const std::vector<int> kLens = {5, 1, 0, 8, 3};

void expect_forward_matches_naive(Packed& p) {
  Arena scratch(1 << 20, Device::cpu, "test");
  const Result r = forward(ctx_with(scratch), p);
  EXPECT_EQ(scratch.used(), 0u) << "scratch must be released";
  std::vector<double> want;
  double want_lse;
  for (int64_t i = 0; i < p.T; ++i)
    for (int64_t h = 0; h < p.Hq; ++h) {
      naive_row(p, i, h, want, want_lse);
      for (int64_t d = 0; d < p.D; ++d)
        ASSERT_NEAR(r.out[(i * p.Hq + h) * p.D + d], want[d], 2e-6) << "row " << i << " head " << h;
      ASSERT_NEAR(r.lse[h * p.T + i], want_lse, 2e-6 * (1 + std::fabs(want_lse))) << "lse " << i << " " << h;
    }
}

TEST(Attention, ForwardMatchesNaiveGqaMhaMqa) {
  for (auto [Hq, Hkv] : {std::pair<int64_t, int64_t>{4, 2}, {3, 3}, {6, 1}}) {
    SCOPED_TRACE(testing::Message() << "Hq " << Hq << " Hkv " << Hkv);
    Packed p = make_packed(kLens, Hq, Hkv, 7, 100 + uint32_t(Hq));
    expect_forward_matches_naive(p);
  }
}

TEST(Attention, ForwardWithCustomScaleAndSingleTokenSequences) {
  Packed p = make_packed({1, 1, 1, 2}, 2, 1, 4, 200);
  p.scale = 0.3f;
  expect_forward_matches_naive(p);
  // A length-1 sequence sees only itself: out = v, lse = scale * q.k.
  Arena scratch(1 << 16, Device::cpu, "test");
  const Result r = forward(ctx_with(scratch), p);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(r.out[(1 * 2 + h) * 4 + d], p.v[1 * 4 + d]);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (auto [Hq, Hkv] : {std::pair<int64_t, int64_t>{4, 2}, {3, 3}}) {
    SCOPED_TRACE(testing::Message() << "Hq " << Hq << " Hkv " << Hkv);
    Packed p = make_packed(kLens, Hq, Hkv, 5, 300 + uint32_t(Hq));
    Arena scratch(1 << 20, Device::cpu, "test");
    const ops::Ctx ctx = ctx_with(scratch);
    Result r = forward(ctx, p);
    auto dout = test::random_vector(r.out.size(), 310);
    const Grads g = backward(ctx, p, r, dout);
    EXPECT_EQ(scratch.used(), 0u);
    auto loss = [&] { return test::dot(dout, forward(ctx, p).out); };
    test::expect_gradient("dq", p.q, g.dq, loss, p.q.size());
    test::expect_gradient("dk", p.k, g.dk, loss, p.k.size());
    test::expect_gradient("dv", p.v, g.dv, loss, p.v.size());
  }
}

TEST(Attention, SameBitsForAnyThreadCount) {
  Packed p = make_packed({37, 1, 20, 64, 2}, 4, 2, 16, 400);
  Arena scratch(1 << 20, Device::cpu, "test");
  const ops::Ctx ctx = ctx_with(scratch);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Result r1 = forward(ctx, p);
  auto dout = test::random_vector(r1.out.size(), 410);
  const Grads g1 = backward(ctx, p, r1, dout);
  omp_set_num_threads(3);
  Result r3 = forward(ctx, p);
  const Grads g3 = backward(ctx, p, r3, dout);
  omp_set_num_threads(saved);
  EXPECT_EQ(r1.out, r3.out);
  EXPECT_EQ(r1.lse, r3.lse);
  EXPECT_EQ(g1.dq, g3.dq);
  EXPECT_EQ(g1.dk, g3.dk);
  EXPECT_EQ(g1.dv, g3.dv);
}

TEST(Attention, LongSequencesNeedOnlyLinearScratch) {
  // T^2 floats would be 25 MB; the scratch holds 256 KB.
  Packed p = make_packed({2000, 1, 500}, 2, 1, 8, 500);
  Arena scratch(256 << 10, Device::cpu, "small");
  const ops::Ctx ctx = ctx_with(scratch);
  Result r = forward(ctx, p);
  std::vector<double> want;
  double want_lse;
  for (int64_t i : {0, 1, 999, 1999, 2000, 2001, 2500})
    for (int64_t h = 0; h < p.Hq; ++h) {
      naive_row(p, i, h, want, want_lse);
      for (int64_t d = 0; d < p.D; ++d) EXPECT_NEAR(r.out[(i * p.Hq + h) * p.D + d], want[d], 1e-5);
      EXPECT_NEAR(r.lse[h * p.T + i], want_lse, 1e-5 * (1 + std::fabs(want_lse)));
    }
  auto dout = test::random_vector(r.out.size(), 510);
  const Grads g = backward(ctx, p, r, dout);
  EXPECT_LT(scratch.peak(), size_t(64) << 10);
  // Softmax ignores a shift of all keys of a sequence, so sum_j dk_j = 0;
  // a shift of all values shifts every output, so sum_j dv_j = sum_i dout_i
  // (per kv head, over its query heads).
  const int64_t D = p.D;
  for (int64_t b = 0; b < p.B(); ++b) {
    std::vector<double> sk(D, 0), ak(D, 0), sv(D, 0), so(D, 0), av(D, 0);
    for (int64_t j = p.cu[b]; j < p.cu[b + 1]; ++j)
      for (int64_t d = 0; d < D; ++d) {
        sk[d] += g.dk[j * D + d];
        ak[d] += std::fabs(g.dk[j * D + d]);
        sv[d] += g.dv[j * D + d];
        av[d] += std::fabs(g.dv[j * D + d]);
        for (int64_t h = 0; h < p.Hq; ++h) so[d] += dout[(j * p.Hq + h) * D + d];
      }
    for (int64_t d = 0; d < D; ++d) {
      EXPECT_NEAR(sk[d], 0.0, 1e-4 * ak[d] + 1e-6) << "seq " << b << " d " << d;
      EXPECT_NEAR(sv[d], so[d], 1e-4 * av[d] + 1e-6) << "seq " << b << " d " << d;
    }
  }
  for (float x : g.dq) ASSERT_TRUE(std::isfinite(x));
}

TEST(Attention, EmptyBatchIsANoOp) {
  Packed p = make_packed({}, 2, 1, 4, 600);
  Packed p0 = make_packed({0, 0}, 2, 1, 4, 601);
  const ops::Ctx ctx = test::cpu_ctx();  // no scratch needed for nothing
  for (Packed* x : {&p, &p0}) {
    Result r = forward(ctx, *x);
    std::vector<float> dout;
    backward(ctx, *x, r, dout);
  }
}

TEST(AttentionDeathTest, BadCuSeqlensIsAnError) {
  Packed p = make_packed({3, 2}, 2, 1, 4, 700);
  p.cu.back() = 4;  // does not end at T = 5
  Arena scratch(1 << 16, Device::cpu, "test");
  EXPECT_EXIT(forward(ctx_with(scratch), p), testing::ExitedWithCode(1), "cu_seqlens\\[B\\] = 4 but T = 5");
  Packed g = make_packed({3}, 3, 2, 4, 701);
  EXPECT_EXIT(forward(ctx_with(scratch), g), testing::ExitedWithCode(1), "not a multiple of Hkv");
}

TEST(AttentionDeathTest, ContractIsCheckedBeforeTheBackend) {
  Packed p = make_packed({3, 2}, 2, 1, 4, 710);
  Arena scratch(1 << 16, Device::cpu, "test");
  std::vector<float> lse(size_t(p.Hq * p.T));
  // out written over q, which the rows still read.
  EXPECT_EXIT(ops::attention_forward(ctx_with(scratch), p.tq(), tensor_f32(lse.data(), {p.Hq, p.T}), p.tq(), p.tk(),
                                     p.tv(), p.tcu(), p.T, p.scale),
              testing::ExitedWithCode(1), "attention_forward: out overlaps q");
  std::vector<float> out(p.q.size());
  // k of another dtype than q.
  EXPECT_EXIT(ops::attention_forward(ctx_with(scratch), tensor_f32(out.data(), {p.T, p.Hq, p.D}),
                                     tensor_f32(lse.data(), {p.Hq, p.T}), p.tq(),
                                     Tensor(p.k.data(), DType::bf16, {p.T, p.Hkv, p.D}), p.tv(), p.tcu(), p.T,
                                     p.scale),
              testing::ExitedWithCode(1), "attention_forward: k is bf16, expected f32");
  EXPECT_EXIT(ops::attention_forward(ctx_with(scratch), tensor_f32(out.data(), {p.T, p.Hq, p.D}),
                                     tensor_f32(lse.data(), {p.Hq, p.T}), p.tq(), p.tk(), p.tv(), p.tcu(), p.T, NAN),
              testing::ExitedWithCode(1), "attention_forward: scale nan is not finite");
}

}  // namespace
}  // namespace dapo
