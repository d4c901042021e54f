// Embedding: lookup against the table, vocab shards (zero rows for ids of
// other shards; the shards' outputs sum to the full lookup), scatter-add
// backward against a naive loop and finite differences, accumulation,
// bitwise determinism across thread counts, and a negative id failing.
#include "dapo/ops/embedding.h"

#include <omp.h>

#include <cstring>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }
Tensor i32(std::vector<int32_t>& v) { return tensor_i32(v.data(), {int64_t(v.size())}); }

TEST(Embedding, ForwardCopiesRows) {
  const int64_t V = 10, C = 7;
  std::vector<int32_t> ids = {3, 0, 9, 3, 5, 5, 1, 9, 2};  // repeats, first and last row
  const int64_t N = int64_t(ids.size());
  auto w = test::random_vector(V * C, 1);
  std::vector<float> out(N * C, -7.0f);
  ops::embedding_forward(test::cpu_ctx(), f32(out, {N, C}), i32(ids), f32(w, {V, C}), 0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[i * C + c], w[ids[i] * C + c]) << i << "," << c;
}

TEST(Embedding, ShardsGiveZeroRowsForOtherIdsAndSumToFullLookup) {
  const int64_t V = 11, C = 5;
  std::vector<int32_t> ids = {0, 3, 4, 10, 7, 3, 6};
  const int64_t N = int64_t(ids.size());
  auto w = test::random_vector(V * C, 2);
  std::vector<float> full(N * C);
  ops::embedding_forward(test::cpu_ctx(), f32(full, {N, C}), i32(ids), f32(w, {V, C}), 0);

  // Three uneven shards [0,4), [4,7), [7,11) of the same table.
  const int64_t bounds[] = {0, 4, 7, 11};
  std::vector<float> sum(N * C, 0.0f);
  for (int s = 0; s < 3; ++s) {
    const int64_t v0 = bounds[s], vl = bounds[s + 1] - bounds[s];
    std::vector<float> shard(w.begin() + v0 * C, w.begin() + (v0 + vl) * C);
    std::vector<float> out(N * C, 99.0f);
    ops::embedding_forward(test::cpu_ctx(), f32(out, {N, C}), i32(ids), f32(shard, {vl, C}), v0);
    for (int64_t i = 0; i < N; ++i) {
      const bool mine = ids[i] >= v0 && ids[i] < v0 + vl;
      for (int64_t c = 0; c < C; ++c) {
        const float want = mine ? w[ids[i] * C + c] : 0.0f;
        ASSERT_EQ(out[i * C + c], want) << "shard " << s << " token " << i;
        sum[i * C + c] += out[i * C + c];
      }
    }
  }
  EXPECT_EQ(sum, full);
}

TEST(Embedding, EmptyBatch) {
  std::vector<int32_t> ids;
  std::vector<float> w = test::random_vector(4 * 3, 3), out, dw(4 * 3, 1.0f);
  ops::embedding_forward(test::cpu_ctx(), tensor_f32(out.data(), {0, 3}), i32(ids), f32(w, {4, 3}), 0);
  ops::embedding_backward(test::cpu_ctx(), f32(dw, {4, 3}), tensor_f32(out.data(), {0, 3}), i32(ids), 0);
  for (float v : dw) EXPECT_EQ(v, 1.0f);
}

TEST(Embedding, BackwardScatterAddsAndAccumulates) {
  const int64_t V_local = 6, C = 37, vocab_start = 5;  // C crosses the column chunk size
  std::vector<int32_t> ids = {5, 7, 7, 2, 10, 11, 5, 5, 0, 9, 7};  // 2, 0, 11 belong to other shards
  const int64_t N = int64_t(ids.size());
  auto dout = test::random_vector(N * C, 4);
  const auto dw0 = test::random_vector(V_local * C, 5);
  std::vector<double> grad(V_local * C, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t r = ids[i] - vocab_start;
    if (r < 0 || r >= V_local) continue;
    for (int64_t c = 0; c < C; ++c) grad[r * C + c] += dout[i * C + c];
  }
  auto dw = dw0;
  for (int call = 1; call <= 2; ++call) {
    ops::embedding_backward(test::cpu_ctx(), f32(dw, {V_local, C}), f32(dout, {N, C}), i32(ids),
                            vocab_start);
    for (size_t k = 0; k < dw.size(); ++k)
      ASSERT_NEAR(dw[k], dw0[k] + call * grad[k], 1e-5) << "call " << call << " index " << k;
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int64_t V = 5, C = 4;
  std::vector<int32_t> ids = {1, 4, 1, 0, 1, 3};
  const int64_t N = int64_t(ids.size());
  auto w = test::random_vector(V * C, 6), dout = test::random_vector(N * C, 7);
  std::vector<float> dw(V * C, 0.0f), out(N * C);
  const auto ctx = test::cpu_ctx();
  ops::embedding_backward(ctx, f32(dw, {V, C}), f32(dout, {N, C}), i32(ids), 0);
  auto loss = [&] {
    ops::embedding_forward(ctx, f32(out, {N, C}), i32(ids), f32(w, {V, C}), 0);
    return test::dot(dout, out);
  };
  test::expect_gradient("dweight", w, dw, loss);
}

TEST(Embedding, BackwardIndependentOfThreadCount) {
  const int64_t V = 3, C = 100, N = 2000;
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = int32_t((i * 7) % 4);  // id 3 is outside the table
  auto dout = test::random_vector(N * C, 8, -50, 50);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    std::vector<float> dw(V * C, 0.25f);
    ops::embedding_backward(test::cpu_ctx(), f32(dw, {V, C}), f32(dout, {N, C}), i32(ids), 0);
    results.push_back(dw);
  }
  omp_set_num_threads(saved);
  for (size_t r = 1; r < results.size(); ++r)
    EXPECT_EQ(0, std::memcmp(results[0].data(), results[r].data(), V * C * sizeof(float)));
}

TEST(EmbeddingDeathTest, NegativeIdIsACheckFailure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int32_t> ids = {1, -3, 0};
  auto w = test::random_vector(4 * 2, 9);
  std::vector<float> out(3 * 2), dw(4 * 2), dout(3 * 2);
  EXPECT_DEATH(ops::embedding_forward(test::cpu_ctx(), f32(out, {3, 2}), i32(ids), f32(w, {4, 2}), 0),
               "negative");
  EXPECT_DEATH(ops::embedding_backward(test::cpu_ctx(), f32(dw, {4, 2}), f32(dout, {3, 2}), i32(ids), 0),
               "negative");
}

}  // namespace
}  // namespace dapo
