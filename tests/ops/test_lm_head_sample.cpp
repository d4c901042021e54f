// The CPU lm_head_sample: the head's logits then sample_tokens, the same
// bits as that composition (the reference the CUDA op is tested against),
// with logit_rows; the scratch released; the rules every backend shares
// (untruncated sampling only, rows against the hidden rows); and never the
// preferred path on the CPU.
#include "dapo/ops/lm_head_sample.h"

#include <cstring>

#include "dapo/core/arena.h"
#include "dapo/core/rng.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/sampling.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

struct Fixture {
  Arena arena{size_t(64) << 20, Device::cpu, "test_lm_head_sample"};
  ops::Ctx ctx = [this] {
    ops::Ctx c;
    c.scratch = &arena;
    return c;
  }();
};

ops::SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f) {
  ops::SamplingParams p;
  p.seed = 5;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

TEST(LmHeadSample, IsTheHeadThenSampleTokens) {
  Fixture f;
  const int64_t B = 6, V = 333, C = 40;
  std::vector<float> h = test::random_vector(size_t(B * C), 1), w = test::random_vector(size_t(V * C), 2, -2, 2);
  for (const bool with_rows : {false, true}) {
    std::vector<int32_t> rows = {5, 0, 0, 3, 5, 1, 2};
    const int64_t R = with_rows ? int64_t(rows.size()) : B;
    std::vector<int64_t> streams(static_cast<size_t>(R)), counters(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      streams[size_t(r)] = int64_t(stream_id({7, uint64_t(r)}));
      counters[size_t(r)] = 3 * r;
    }
    const Tensor rows_t = with_rows ? tensor_i32(rows.data(), {R}) : Tensor{};
    for (const float T : {1.0f, 0.6f}) {
      std::vector<float> logits(static_cast<size_t>(B * V));
      ops::linear_forward(f.ctx, tensor_f32(logits.data(), {B, V}), tensor_f32(h.data(), {B, C}),
                          tensor_f32(w.data(), {V, C}), Tensor{});
      std::vector<int32_t> want(static_cast<size_t>(R)), got(static_cast<size_t>(R));
      std::vector<float> want_lp(static_cast<size_t>(R)), got_lp(static_cast<size_t>(R));
      ops::sample_tokens(f.ctx, tensor_i32(want.data(), {R}), tensor_f32(want_lp.data(), {R}),
                         tensor_f32(logits.data(), {B, V}), rows_t, tensor_i64(streams.data(), {R}),
                         tensor_i64(counters.data(), {R}), params(T));
      ops::lm_head_sample(f.ctx, tensor_i32(got.data(), {R}), tensor_f32(got_lp.data(), {R}),
                          tensor_f32(h.data(), {B, C}), tensor_f32(w.data(), {V, C}), rows_t,
                          tensor_i64(streams.data(), {R}), tensor_i64(counters.data(), {R}), params(T));
      EXPECT_EQ(got, want);
      EXPECT_EQ(std::memcmp(got_lp.data(), want_lp.data(), size_t(R) * sizeof(float)), 0);
      EXPECT_EQ(f.arena.used(), 0u) << "scratch not released";
    }
  }
  EXPECT_FALSE(ops::lm_head_sample_preferred(f.ctx, tensor_f32(h.data(), {B, C}), tensor_f32(w.data(), {V, C}),
                                             params(1.0f)));
}

// Under a folded norm: the same as the composition on the rows scaled by
// row_norm_apply.
TEST(LmHeadSample, FoldedNormScalesTheRows) {
  Fixture f;
  const int64_t B = 4, V = 200, C = 64, P = ops::norm_fold_parts(C);
  std::vector<float> h = test::random_vector(size_t(B * C), 11), w = test::random_vector(size_t(V * C), 12, -2, 2);
  std::vector<float> ssq = test::random_vector(size_t(B * P), 13, 1.0f, 40.0f);
  std::vector<int64_t> streams = {1, 2, 3, 4}, counters = {5, 6, 7, 8};
  const ops::RowNorm norm{tensor_f32(ssq.data(), {B, P}), 1e-6f};
  std::vector<float> scaled = h, logits(static_cast<size_t>(B * V));
  ops::row_norm_apply(f.ctx, tensor_f32(scaled.data(), {B, C}), norm);
  ops::linear_forward(f.ctx, tensor_f32(logits.data(), {B, V}), tensor_f32(scaled.data(), {B, C}),
                      tensor_f32(w.data(), {V, C}), Tensor{});
  std::vector<int32_t> want(4), got(4);
  std::vector<float> want_lp(4), got_lp(4);
  ops::sample_tokens(f.ctx, tensor_i32(want.data(), {B}), tensor_f32(want_lp.data(), {B}),
                     tensor_f32(logits.data(), {B, V}), Tensor{}, tensor_i64(streams.data(), {B}),
                     tensor_i64(counters.data(), {B}), params(1.0f));
  ops::lm_head_sample(f.ctx, tensor_i32(got.data(), {B}), tensor_f32(got_lp.data(), {B}), tensor_f32(h.data(), {B, C}),
                      tensor_f32(w.data(), {V, C}), Tensor{}, tensor_i64(streams.data(), {B}),
                      tensor_i64(counters.data(), {B}), params(1.0f), norm);
  EXPECT_EQ(got, want);
  EXPECT_EQ(std::memcmp(got_lp.data(), want_lp.data(), size_t(B) * sizeof(float)), 0);
  EXPECT_EQ(f.arena.used(), 0u) << "scratch not released";
}

TEST(LmHeadSample, RejectsWhatItDoesNotSample) {
  Fixture f;
  const int64_t B = 2, V = 50, C = 8;
  std::vector<float> h = test::random_vector(size_t(B * C), 3), w = test::random_vector(size_t(V * C), 4);
  std::vector<int32_t> tok(3);
  std::vector<float> lp(3);
  std::vector<int64_t> st(3), ct(3);
  auto run = [&](int64_t R, const ops::SamplingParams& p) {
    ops::lm_head_sample(f.ctx, tensor_i32(tok.data(), {R}), tensor_f32(lp.data(), {R}), tensor_f32(h.data(), {B, C}),
                        tensor_f32(w.data(), {V, C}), Tensor{}, tensor_i64(st.data(), {R}),
                        tensor_i64(ct.data(), {R}), p);
  };
  EXPECT_DEATH(run(B, params(0.0f)), "temperature 0");
  EXPECT_DEATH(run(B, params(1.0f, 10)), "truncated rows");
  EXPECT_DEATH(run(B, params(1.0f, 0, 0.9f)), "truncated rows");
  EXPECT_DEATH(run(3, params(1.0f)), "need logit_rows");
  run(B, params(1.0f, int(V)));  // top_k >= V is off
  EXPECT_GE(tok[0], 0);
  EXPECT_LT(tok[0], V);
}

}  // namespace
}  // namespace dapo
