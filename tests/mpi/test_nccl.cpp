// Comm's device collectives through NCCL (mpirun -np 2/4, one GPU per rank
// when the machine has enough; skipped on machines without GPUs, such as
// CI): all-reduce (sum, max; f32, bf16, i64), all-gather (separate and in
// place), reduce-scatter and broadcast on device tensors give exactly what
// the MPI path gives on the same host data; the tp and dp Comms of a grid
// each get their own NCCL communicator; no asynchronous NCCL error remains.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/parallel/grid.h"
#include "mpi/mpi_test_util.h"

namespace dapo::parallel {
namespace {

class NcclComm : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = ops::cuda_device_count();
    const Comm world = Comm::world();
    const int64_t need = world.all_reduce_i64(gpus >= world.size() ? 0 : 1, ReduceOp::max);
    if (need) GTEST_SKIP() << "needs one GPU per rank (" << gpus << " visible)";
    device_ = std::make_unique<ops::CudaDevice>(world.rank());
    arena_ = std::make_unique<Arena>(size_t(64) << 20, Device::cuda, "nccl-test");
  }
  // Uploads host data (dtype t, values exact in every dtype) to the device.
  Tensor upload(const test::Buf& b, std::initializer_list<int64_t> dims) {
    Tensor d = arena_->alloc(b.dtype, dims);
    device_->copy_to_device(d, Tensor(const_cast<std::byte*>(b.bytes.data()), b.dtype, dims));
    return d;
  }
  test::Buf download(const Tensor& d) {
    test::Buf b(d.dtype, d.numel());
    Tensor host(b.bytes.data(), d.dtype, {d.numel()});
    device_->synchronize();
    device_->copy_to_host(host, Tensor(d.data, d.dtype, {d.numel()}, Device::cuda));
    return b;
  }
  void* stream() const { return device_->ctx(nullptr).stream; }

  std::unique_ptr<ops::CudaDevice> device_;
  std::unique_ptr<Arena> arena_;
};

void expect_equal(const test::Buf& a, const test::Buf& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.get(i), b.get(i)) << what << " element " << i;
}

TEST_F(NcclComm, CollectivesEqualTheMpiPath) {
  const Comm world = Comm::world();
  const int r = world.rank(), P = world.size();
  constexpr int64_t n = 1000;
  for (const DType t : {DType::f32, DType::bf16, DType::i64}) {
    SCOPED_TRACE(dtype_name(t));
    test::Buf host(t, n);
    for (int64_t i = 0; i < n; ++i) host.set(i, test::value_of(t, r, i));
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      test::Buf want = host;
      world.all_reduce(want.view({n}), op);
      Tensor d = upload(host, {n});
      world.all_reduce(d, op, stream());
      expect_equal(download(d), want, reduce_op_name(op));
    }
    // all_gather, separate buffers and in place.
    test::Buf gathered(t, n * P);
    world.all_gather(gathered.view({n * P}), host.view({n}));
    Tensor out = arena_->alloc(t, {n * P});
    world.all_gather(out, upload(host, {n}), stream());
    expect_equal(download(out), gathered, "all_gather");
    Tensor inplace = arena_->alloc(t, {n * P});
    Tensor own(static_cast<char*>(inplace.data) + size_t(r * n) * dtype_size(t), t, {n}, Device::cuda);
    device_->copy_to_device(own, Tensor(host.bytes.data(), t, {n}));
    world.all_gather(inplace, own, stream());
    expect_equal(download(inplace), gathered, "in-place all_gather");
    // reduce_scatter of P blocks of n.
    test::Buf big(t, n * P);
    for (int64_t i = 0; i < n * P; ++i) big.set(i, test::value_of(t, r, i));
    test::Buf scattered(t, n);
    world.reduce_scatter(scattered.view({n}), big.view({n * P}), ReduceOp::sum);
    Tensor rs = arena_->alloc(t, {n});
    world.reduce_scatter(rs, upload(big, {n * P}), ReduceOp::sum, stream());
    expect_equal(download(rs), scattered, "reduce_scatter");
    // broadcast from the last rank.
    test::Buf bc = host;
    world.broadcast(bc.view({n}), P - 1);
    Tensor db = upload(host, {n});
    world.broadcast(db, P - 1, stream());
    expect_equal(download(db), bc, "broadcast");
  }
  EXPECT_EQ(world.nccl_async_error(), "");
}

TEST_F(NcclComm, GridCommsEachGetTheirOwn) {
  const Comm world = Comm::world();
  for (const int tp : test::tp_choices(world.size())) {
    const Grid g = make_grid(world, tp);
    SCOPED_TRACE("tp " + std::to_string(tp));
    test::Buf host(DType::f32, 64);
    for (int64_t i = 0; i < 64; ++i) host.set(i, test::value_of(DType::f32, world.rank(), i));
    for (const Comm* c : {&g.tp, &g.dp}) {
      test::Buf want = host;
      c->all_reduce(want.view({64}), ReduceOp::sum);
      Tensor d = upload(host, {64});
      c->all_reduce(d, ReduceOp::sum, stream());
      expect_equal(download(d), want, c == &g.tp ? "tp" : "dp");
      EXPECT_EQ(c->nccl_async_error(), "");
    }
  }
}

}  // namespace
}  // namespace dapo::parallel
