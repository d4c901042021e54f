// rollout::sample_tokens_tp on device tensors through NCCL (mpirun -np 2/4,
// one GPU per rank; skipped without them, as in CI): on tp = 2 and tp =
// world groups, each rank holding only its vocabulary shard (f32 and bf16),
// the tokens equal the unsharded CUDA op's on the full logits on the rank's
// own GPU, every rank of a group returns the same tokens and log-prob bits,
// and the log-probs match. The same composition on host tensors is checked
// in CI by test_sampling_tp.cpp. Named Nccl* so that the GPU ctest entries
// pick it up.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/core/bf16.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/parallel/comm.h"
#include "dapo/rollout/tp_sampling.h"
#include "mpi/sampling_tp_cases.h"

namespace dapo::parallel {
namespace {

class NcclSampling : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = ops::cuda_device_count();
    const Comm world = Comm::world();
    const int64_t need = world.all_reduce_i64(gpus >= world.size() ? 0 : 1, ReduceOp::max);
    if (need) GTEST_SKIP() << "needs one GPU per rank (" << gpus << " visible)";
    device_ = std::make_unique<ops::CudaDevice>(world.rank());
    arena_ = std::make_unique<Arena>(size_t(512) << 20, Device::cuda, "nccl-sampling");
    scratch_ = std::make_unique<Arena>(size_t(64) << 20, Device::cuda, "nccl-sampling-scratch");
  }
  template <class T>
  Tensor upload(const std::vector<T>& v, std::initializer_list<int64_t> dims, DType dt) {
    Tensor d = arena_->alloc(dt, dims);
    if (dt == DType::bf16) {
      std::vector<bf16> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = to_bf16(float(v[i]));
      device_->copy_to_device(d, Tensor(b.data(), dt, dims));
    } else {
      device_->copy_to_device(d, Tensor(const_cast<T*>(v.data()), dt, dims));
    }
    return d;
  }
  template <class T>
  std::vector<T> download(const Tensor& d) {
    std::vector<T> out(static_cast<size_t>(d.numel()));
    device_->synchronize();
    device_->copy_to_host(Tensor(out.data(), d.dtype, {d.numel()}), Tensor(d.data, d.dtype, {d.numel()}, Device::cuda));
    return out;
  }

  std::unique_ptr<ops::CudaDevice> device_;
  std::unique_ptr<Arena> arena_, scratch_;
};

TEST_F(NcclSampling, ShardedEqualsTheUnshardedOp) {
  const Comm world = Comm::world();
  const ops::Ctx ctx = device_->ctx(scratch_.get());
  int64_t sampled = 0, differ = 0;
  std::vector<int> sizes = {2};
  if (world.size() > 2) sizes.push_back(world.size());
  for (const int tp_size : sizes) {
    if (world.size() % tp_size != 0) continue;
    const Comm tp = world.split(world.rank() / tp_size, world.rank());
    for (const int64_t V : {int64_t(1000), int64_t(151936)}) {
      const int64_t B = V > 10000 ? 16 : 24, Vs = V / tp_size;
      std::vector<int32_t> rows;
      std::vector<int64_t> streams, counters;
      test::tp_sampling_rows(B, rows, streams, counters);
      const int64_t R = int64_t(rows.size());
      for (const DType dt : {DType::f32, DType::bf16})
        for (const auto& c : test::tp_sampling_cases()) {
          SCOPED_TRACE(testing::Message() << "tp " << tp_size << " V " << V << " " << dtype_name(dt) << " " << c.name);
          ArenaScope scope(*arena_);
          std::vector<float> x = test::tp_sampling_logits(B, V, c.coarse, 40 + uint32_t(V));
          // bf16-exact values, so that the shards and the full rows round alike.
          if (dt == DType::bf16)
            for (auto& v : x) v = to_f32(to_bf16(v));
          Tensor drows = upload(rows, {R}, DType::i32), ds = upload(streams, {R}, DType::i64),
                 dc = upload(counters, {R}, DType::i64);
          Tensor full = upload(x, {B, V}, dt), shard = upload(test::tp_shard(x, B, V, tp_size, tp.rank()), {B, Vs}, dt);
          Tensor wt = arena_->alloc(DType::i32, {R}), wl = arena_->alloc(DType::f32, {R});
          ops::sample_tokens(ctx, wt, wl, full, drows, ds, dc, c.p);
          Tensor gt = arena_->alloc(DType::i32, {R}), gl = arena_->alloc(DType::f32, {R});
          rollout::sample_tokens_tp(ctx, tp, gt, gl, shard, drows, ds, dc, c.p, int64_t(tp.rank()) * Vs);
          const auto want = download<int32_t>(wt), got = download<int32_t>(gt);
          const auto want_lp = download<float>(wl), got_lp = download<float>(gl);
          ASSERT_EQ(device_->read_flags().non_finite_count, 0);

          std::vector<int64_t> mx(static_cast<size_t>(2 * R));
          for (int64_t r = 0; r < R; ++r) {
            uint32_t bits;
            std::memcpy(&bits, &got_lp[size_t(r)], 4);
            mx[size_t(r)] = got[size_t(r)];
            mx[size_t(R + r)] = int64_t(bits);
          }
          std::vector<int64_t> mn = mx;
          tp.all_reduce_i64(mx, ReduceOp::max);
          tp.all_reduce_i64(mn, ReduceOp::min);
          ASSERT_EQ(mx, mn) << "tp ranks disagree";
          for (int64_t r = 0; r < R; ++r) {
            ASSERT_GE(got[size_t(r)], 0);
            ASSERT_LT(got[size_t(r)], V);
            if (got[size_t(r)] != want[size_t(r)]) {
              ++differ;
              continue;
            }
            EXPECT_NEAR(got_lp[size_t(r)], want_lp[size_t(r)], 2e-6 + 1e-6 * std::fabs(want_lp[size_t(r)]))
                << "row " << r;
          }
          sampled += R;
        }
    }
  }
  EXPECT_EQ(differ, 0) << "of " << sampled << " sampled rows";
}

}  // namespace
}  // namespace dapo::parallel
