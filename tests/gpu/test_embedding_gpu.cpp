// Embedding on the GPU (f32 and bf16 tables) against the CPU reference:
// vocab shards (ids below and above the shard give zero rows / are
// skipped), rows of no whole 16-byte units, empty and one-row batches, a
// large batch; many repeats of few ids (runs across the backward's chunks)
// bitwise repeatable; a negative id flagged with its row and value; perf.
#include "dapo/ops/embedding.h"

#include <cstring>

#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

Tensor host(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }
Tensor host_ids(std::vector<int32_t>& v) { return tensor_i32(v.data(), {int64_t(v.size())}); }

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

std::vector<int32_t> random_ids(int64_t n, int32_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = dist(gen);
  return ids;
}

class EmbeddingGpu : public GpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  // Forward against the CPU (bit for bit), then the backward twice from the
  // same non-zero dweight (bitwise equal runs, close to the CPU's sums).
  void check(std::vector<int32_t> ids, int64_t V, int64_t C, int64_t vocab_start, uint32_t seed) {
    const DType dt = GetParam();
    const int64_t N = int64_t(ids.size());
    SCOPED_TRACE(testing::Message() << "N " << N << " V " << V << " C " << C << " vocab_start " << vocab_start);
    auto w = random_bf16_exact(V * C, seed), dout = random_bf16_exact(N * C, seed + 1);
    auto dw0 = random_bf16_exact(V * C, seed + 2);
    std::vector<float> out(N * C), dw = dw0;
    ops::embedding_forward(cpu(), host(out, {N, C}), host_ids(ids), host(w, {V, C}), vocab_start);
    ops::embedding_backward(cpu(), host(dw, {V, C}), host(dout, {N, C}), host_ids(ids), vocab_start);

    Tensor gids = upload_raw(ids, {N}), gw = upload(w, {V, C}, dt), gdout = upload(dout, {N, C}, dt);
    Tensor gout = guarded(dt, {N, C});
    ops::embedding_forward(gpu(), gout, gids, gw, vocab_start);
    const auto out_g = download(gout);
    EXPECT_TRUE(same_bits(out_g, out)) << "forward is not the CPU's rows";

    std::vector<std::vector<float>> dws;
    for (int run = 0; run < 2; ++run) {
      Tensor gdw = guarded(DType::f32, {V, C});
      device_->copy_to_device(gdw, host(dw0, {V, C}));
      ops::embedding_backward(gpu(), gdw, gdout, gids, vocab_start);
      dws.push_back(download(gdw));
    }
    // Repeats of an id are summed in another grouping than the CPU's.
    int64_t most = 1;
    {
      std::vector<int64_t> count(size_t(V), 0);
      for (int32_t id : ids)
        if (id >= vocab_start && id < vocab_start + V) most = std::max(most, ++count[size_t(id - vocab_start)]);
    }
    expect_close(dws[0], dw, 1e-6 * double(most), 1e-6, "dweight");
    EXPECT_TRUE(same_bits(dws[0], dws[1])) << "dweight differs between two runs";
    check_guards();
    const ops::DeviceFlags f = device_->read_flags();
    EXPECT_EQ(f.bad_id_count, 0);
  }
};

TEST_P(EmbeddingGpu, MatchesCpu) {
  // Shard [500, 1500) of a 2000-token vocabulary: ids on both sides of it.
  check(random_ids(37, 2000, 1), 1000, 1536, 500, 10);
  check(random_ids(33, 300, 2), 300, 896, 0, 20);
  check(random_ids(300, 500, 3), 257, 999, 100, 30);  // rows of no whole 16-byte units
  check(random_ids(50, 64, 4), 64, 6, 0, 40);         // C below one unit
  check(random_ids(1, 10, 5), 10, 1536, 0, 50);
  check({}, 10, 1536, 0, 60);
  check(random_ids(16384, 4000, 6), 4000, 1536, 0, 70);
}

TEST_P(EmbeddingGpu, ManyRepeatsOfFewIds) {
  // 4096 rows over 7 distinct ids, two of them in other shards: runs of
  // hundreds of rows that cross many chunks of the backward.
  const int32_t distinct[] = {100, 105, 999, 50, 5000, 223, 142};
  std::mt19937 gen(7);
  std::discrete_distribution<int> pick({40, 5, 20, 10, 10, 1, 14});  // skewed, one id rare
  std::vector<int32_t> ids(4096);
  for (auto& id : ids) id = distinct[pick(gen)];
  check(ids, 900, 1536, 100, 80);
  check(ids, 900, 999, 100, 90);
  // One id for every row.
  check(std::vector<int32_t>(4096, 777), 900, 896, 100, 100);
}

TEST_P(EmbeddingGpu, NegativeIdIsFlaggedAndGivesZeroRow) {
  const DType dt = GetParam();
  const int64_t V = 50, C = 64, N = 9;
  std::vector<int32_t> ids = random_ids(N, int32_t(V), 11);
  ids[5] = -3;
  const auto w = random_bf16_exact(V * C, 12);
  device_->clear_flags();
  Tensor gout = guarded(dt, {N, C});
  ops::embedding_forward(gpu(), gout, upload_raw(ids, {N}), upload(w, {V, C}, dt), 0);
  const auto out = download(gout);
  const ops::DeviceFlags f = device_->read_flags();
  EXPECT_EQ(f.bad_id_count, 1);
  EXPECT_EQ(f.bad_id_site, int32_t(ops::FlagSite::embedding));
  EXPECT_EQ(f.bad_id_row, 5);
  EXPECT_EQ(f.bad_id_value, -3);
  device_->clear_flags();
  for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[5 * C + c], 0.0f) << c;
  for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[4 * C + c], w[ids[4] * C + c]) << c;
  check_guards();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_F(GpuTest, EmbeddingPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const int64_t N = 16384, V = 151936, C = 1536;
  Arena big(size_t(3) << 30, Device::cuda, "perf");
  const ops::Ctx ctx = gpu();
  Tensor w = big.alloc(DType::bf16, {V, C}), dw = big.alloc(DType::f32, {V, C});
  Tensor out = big.alloc(DType::bf16, {N, C}), dout = big.alloc(DType::bf16, {N, C});
  fill_random(*device_, w, 1);
  fill_random(*device_, dw, 2);
  fill_random(*device_, dout, 3);
  const std::string shape = "N=16384,V=151936,C=1536";
  // Uniform ids, and a skewed batch where every 8th token is the same id.
  for (const bool skewed : {false, true}) {
    auto ids = random_ids(N, int32_t(V), 4);
    if (skewed)
      for (int64_t i = 0; i < N; i += 8) ids[size_t(i)] = 198;
    std::vector<char> seen(size_t(V), 0);
    int64_t distinct = 0;
    for (int32_t id : ids) distinct += seen[size_t(id)]++ == 0;
    Tensor gids = upload_raw(ids, {N});
    const char* tag = skewed ? "(1/8 one id)" : "(uniform ids)";
    double ms = time_ms(ctx.stream, [&] { ops::embedding_forward(ctx, out, gids, w, 0); });
    print_perf(std::string("embedding_forward") + tag, shape, "bf16", ms, 2.0 * N * C * 2 + N * 4.0);
    ms = time_ms(ctx.stream, [&] { ops::embedding_backward(ctx, dw, dout, gids, 0); });
    // dout read once, each touched dweight row read and written once.
    print_perf(std::string("embedding_backward") + tag, shape, "bf16->f32", ms,
               double(N) * C * 2 + 2.0 * distinct * C * 4 + N * 4.0);
  }
  EXPECT_EQ(device_->read_flags().bad_id_count, 0);
}

}  // namespace
}  // namespace dapo::test
