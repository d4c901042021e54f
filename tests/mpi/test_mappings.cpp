// Megatron mappings on the tp group of every grid the world size allows:
// forward and backward against values each rank computes alone, the two
// round trips (gather then scatter, scatter then gather), dtypes other than
// f32, empty tensors and in-place use.
#include "dapo/parallel/mappings.h"

#include <string>

#include "dapo/parallel/grid.h"
#include "mpi/mpi_test_util.h"

namespace dapo {
namespace {

using parallel::Grid;
using parallel::make_grid;
using test::Buf;

// A distinct exact value per (world rank, element): tests see which rank's
// data ended where.
double local_value(int world_rank, int64_t i) { return world_rank * 100 + i * 0.5 - 7; }
// The same on every rank: an input replicated across tp.
double shared_value(int64_t i) { return (i * 7 % 13) * 0.25 - 1; }

// Parameter: tp, or 0 for the whole world.
class Mappings : public testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const parallel::Comm world = parallel::Comm::world();
    tp = GetParam() == 0 ? world.size() : GetParam();
    if (world.size() % tp != 0) GTEST_SKIP() << "tp " << tp << " does not divide " << world.size();
    grid = make_grid(world, tp);
    ctx.scratch = &scratch;
  }
  void TearDown() override { EXPECT_EQ(scratch.used(), 0u) << "mapping left scratch allocated"; }

  // World rank of tp rank j of this rank's tp group.
  int member(int j) const { return grid.dp_rank * tp + j; }

  int tp = 1;
  Grid grid;
  Arena scratch{1 << 20, Device::cpu, "test-scratch"};
  ops::Ctx ctx;
};

TEST_P(Mappings, CopyToTp) {
  const int64_t n = 2 * 3 * 5;
  Buf x(DType::f32, n), y(DType::f32, n);
  for (int64_t i = 0; i < n; ++i) x.set(i, shared_value(i));
  parallel::copy_to_tp_forward(ctx, grid.tp, y.view({2, 3, 5}), x.view({2, 3, 5}));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y.get(i), shared_value(i));
  parallel::copy_to_tp_forward(ctx, grid.tp, x.view({2, 3, 5}), x.view({2, 3, 5}));  // in place
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(x.get(i), shared_value(i));

  // Backward: every rank's partial gradient, summed over its tp group.
  Buf dy(DType::f32, n), dx(DType::f32, n);
  for (int64_t i = 0; i < n; ++i) dy.set(i, local_value(grid.world_rank(), i));
  parallel::copy_to_tp_backward(ctx, grid.tp, dx.view({2, 3, 5}), dy.view({2, 3, 5}));
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (int j = 0; j < tp; ++j) want += local_value(member(j), i);
    EXPECT_EQ(dx.get(i), want) << "index " << i;
    EXPECT_EQ(dy.get(i), local_value(grid.world_rank(), i)) << "dout changed, index " << i;
  }
  parallel::copy_to_tp_backward(ctx, grid.tp, dy.view({2, 3, 5}), dy.view({2, 3, 5}));  // in place
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dy.get(i), dx.get(i));
}

TEST_P(Mappings, ReduceFromTp) {
  const int64_t n = 4 * 7;
  Buf x(DType::f32, n), y(DType::f32, n);
  for (int64_t i = 0; i < n; ++i) x.set(i, local_value(grid.world_rank(), i));
  parallel::reduce_from_tp_forward(ctx, grid.tp, y.view({4, 7}), x.view({4, 7}));
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (int j = 0; j < tp; ++j) want += local_value(member(j), i);
    EXPECT_EQ(y.get(i), want) << "index " << i;
  }
  parallel::reduce_from_tp_forward(ctx, grid.tp, x.view({4, 7}), x.view({4, 7}));  // in place
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(x.get(i), y.get(i));

  // Backward: the replicated output gradient passes through unchanged.
  Buf dy(DType::f32, n), dx(DType::f32, n);
  for (int64_t i = 0; i < n; ++i) dy.set(i, shared_value(i));
  parallel::reduce_from_tp_backward(ctx, grid.tp, dx.view({4, 7}), dy.view({4, 7}));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dx.get(i), shared_value(i));
}

// Full (2, 3, C) with C = w * tp; slice (2, 3, w). w odd on purpose.
constexpr int64_t kRows = 2 * 3, kW = 5;

TEST_P(Mappings, ScatterToTp) {
  const int64_t C = kW * tp;
  Buf full(DType::f32, kRows * C), part(DType::f32, kRows * kW);
  for (int64_t k = 0; k < kRows * C; ++k) full.set(k, shared_value(k));
  parallel::scatter_to_tp_forward(ctx, grid.tp, part.view({2, 3, kW}), full.view({2, 3, C}));
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kW; ++j)
      EXPECT_EQ(part.get(i * kW + j), shared_value(i * C + grid.tp_rank * kW + j)) << i << "," << j;

  // Backward: every rank's slice gradient, side by side.
  Buf dpart(DType::f32, kRows * kW), dfull(DType::f32, kRows * C);
  for (int64_t k = 0; k < kRows * kW; ++k) dpart.set(k, local_value(grid.world_rank(), k));
  parallel::scatter_to_tp_backward(ctx, grid.tp, dfull.view({2, 3, C}), dpart.view({2, 3, kW}));
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(dfull.get(i * C + c), local_value(member(int(c / kW)), i * kW + c % kW)) << i << "," << c;
}

TEST_P(Mappings, GatherFromTp) {
  const int64_t C = kW * tp;
  Buf part(DType::f32, kRows * kW), full(DType::f32, kRows * C);
  for (int64_t k = 0; k < kRows * kW; ++k) part.set(k, local_value(grid.world_rank(), k));
  parallel::gather_from_tp_forward(ctx, grid.tp, full.view({2, 3, C}), part.view({2, 3, kW}));
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(full.get(i * C + c), local_value(member(int(c / kW)), i * kW + c % kW)) << i << "," << c;

  // Backward: this rank's columns of the replicated gradient.
  Buf dfull(DType::f32, kRows * C), dpart(DType::f32, kRows * kW);
  for (int64_t k = 0; k < kRows * C; ++k) dfull.set(k, shared_value(k));
  parallel::gather_from_tp_backward(ctx, grid.tp, dpart.view({2, 3, kW}), dfull.view({2, 3, C}));
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kW; ++j)
      EXPECT_EQ(dpart.get(i * kW + j), shared_value(i * C + grid.tp_rank * kW + j)) << i << "," << j;
}

TEST_P(Mappings, RoundTripsInEveryDtype) {
  const int64_t C = kW * tp;
  for (DType t : test::kAllDtypes) {
    SCOPED_TRACE(dtype_name(t));
    // gather then scatter gives back this rank's slice.
    Buf part(t, kRows * kW), full(t, kRows * C), back(t, kRows * kW);
    for (int64_t k = 0; k < kRows * kW; ++k) part.set(k, test::value_of(t, grid.world_rank(), k));
    parallel::gather_from_tp_forward(ctx, grid.tp, full.view({kRows, C}), part.view({kRows, kW}));
    parallel::scatter_to_tp_forward(ctx, grid.tp, back.view({kRows, kW}), full.view({kRows, C}));
    EXPECT_EQ(back.bytes, part.bytes);
    // scatter then gather gives back the replicated full tensor.
    Buf full2(t, kRows * C), slice(t, kRows * kW), again(t, kRows * C);
    for (int64_t k = 0; k < kRows * C; ++k) full2.set(k, test::value_of(t, 0, k));
    parallel::scatter_to_tp_forward(ctx, grid.tp, slice.view({kRows, kW}), full2.view({kRows, C}));
    parallel::gather_from_tp_forward(ctx, grid.tp, again.view({kRows, C}), slice.view({kRows, kW}));
    EXPECT_EQ(again.bytes, full2.bytes);
  }
}

TEST_P(Mappings, EmptyAndOneDimensional) {
  Buf e_part(DType::f32, 0), e_full(DType::f32, 0);
  parallel::gather_from_tp_forward(ctx, grid.tp, e_full.view({0, 3 * tp}), e_part.view({0, 3}));
  parallel::scatter_to_tp_backward(ctx, grid.tp, e_full.view({0, 3 * tp}), e_part.view({0, 3}));
  parallel::scatter_to_tp_forward(ctx, grid.tp, e_part.view({0, 3}), e_full.view({0, 3 * tp}));
  parallel::copy_to_tp_backward(ctx, grid.tp, e_full.view({0}), e_part.view({0}));
  // A 1-d tensor is one row: its last dimension is its only one.
  Buf part(DType::i64, 3), full(DType::i64, 3 * tp);
  for (int64_t j = 0; j < 3; ++j) part.set(j, grid.tp_rank * 10 + j);
  parallel::gather_from_tp_forward(ctx, grid.tp, full.view({3 * tp}), part.view({3}));
  for (int64_t c = 0; c < 3 * tp; ++c) EXPECT_EQ(full.get(c), (c / 3) * 10 + c % 3);
}

INSTANTIATE_TEST_SUITE_P(Tp, Mappings, testing::Values(1, 2, 0), [](const testing::TestParamInfo<int>& i) {
  return i.param == 0 ? std::string("tpWorld") : "tp" + std::to_string(i.param);
});

// Rank 0 only, in a forked child; see CommDeathTest.
TEST(MappingsDeathTest, ArgumentErrorsAreFatal) {
  const Grid grid = make_grid(1);
  if (grid.world_rank() != 0) return;
  ops::Ctx no_scratch;
  std::vector<float> a(64), b(64);
  auto die = [](auto&& f) {
    set_abort_hook(nullptr);
    f();
  };
  EXPECT_DEATH(die([&] {
                 parallel::gather_from_tp_forward(no_scratch, grid.tp, tensor_f32(a.data(), {2, 4}),
                                                  tensor_f32(b.data(), {2, 4}));
               }),
               "ctx.scratch");
  EXPECT_DEATH(die([&] {
                 parallel::scatter_to_tp_forward(no_scratch, grid.tp, tensor_f32(a.data(), {2, 3}),
                                                 tensor_f32(b.data(), {3, 3}));
               }),
               "must agree except in the last dimension");
}

}  // namespace
}  // namespace dapo
