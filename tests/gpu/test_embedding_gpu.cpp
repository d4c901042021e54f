// Embedding on the GPU (f32 and bf16 tables) beyond the comparison with the
// CPU (test_backend_ops_elementwise.cpp): the backward gives the same bits
// on a rerun at the harness's shapes (repeats of few ids across many of its
// chunks included), and a negative id is flagged with its row and value
// and gives a zero row.
#include "dapo/ops/embedding.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

class EmbeddingGpu : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(EmbeddingGpu, BackwardIsBitIdentical) {
  const DType dt = GetParam();
  for (const shapes::EmbeddingRun& r : shapes::embedding_runs()) {
    const int64_t N = int64_t(r.ids.size()), V = r.V, C = r.C;
    SCOPED_TRACE(testing::Message() << "N " << N << " V " << V << " C " << C << " vocab_start " << r.vocab_start);
    const size_t mark = arena_->mark();
    const auto dout = random_bf16_exact(size_t(N * C), r.seed + 1), dw0 = random_bf16_exact(size_t(V * C), r.seed + 2);
    Tensor gids = upload_raw(r.ids, {N}), gdout = upload(dout, {N, C}, dt);
    std::vector<std::vector<unsigned char>> runs;
    for (int run = 0; run < 2; ++run) {
      Tensor gdw = upload(dw0, {V, C});
      ops::embedding_backward(gpu(), gdw, gdout, gids, r.vocab_start);
      runs.push_back(bits(gdw));
    }
    EXPECT_TRUE(runs[0] == runs[1]) << "dweight differs between two runs";
    EXPECT_EQ(device_->read_flags().bad_id_count, 0);
    arena_->reset(mark);
  }
}

TEST_P(EmbeddingGpu, NegativeIdIsFlaggedAndGivesZeroRow) {
  const DType dt = GetParam();
  const int64_t V = 50, C = 64, N = 9;
  std::vector<int32_t> ids = shapes::random_ids(N, int32_t(V), 11);
  ids[5] = -3;
  const auto w = random_bf16_exact(size_t(V * C), 12);
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
  for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[size_t(5 * C + c)], 0.0f) << c;
  for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[size_t(4 * C + c)], w[size_t(ids[4] * C + c)]) << c;
  check_guards();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace dapo::test
