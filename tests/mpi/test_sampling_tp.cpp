// rollout::sample_tokens_tp on host tensors (mpirun -np 2 and 4): on tp = 2
// and tp = 4 groups, each rank holding only its vocabulary shard, the
// tokens equal ops::sample_tokens on the full logits (greedy, temperature,
// top-k, top-p, both, with and without ties at the cuts), every rank of a
// group returns the same tokens and log-probs, and the log-probs match the
// unsharded op's. tp = 1 (a one-rank Comm) gives sample_tokens' bits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/parallel/comm.h"
#include "dapo/rollout/tp_sampling.h"
#include "mpi/sampling_tp_cases.h"

namespace dapo {
namespace {

using parallel::Comm;
using parallel::ReduceOp;

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

Result sample_full(const ops::Ctx& ctx, std::vector<float>& x, int64_t B, int64_t V, std::vector<int32_t>& rows,
                   std::vector<int64_t>& streams, std::vector<int64_t>& counters, const ops::SamplingParams& p) {
  const int64_t R = int64_t(rows.size());
  Result out{std::vector<int32_t>(size_t(R)), std::vector<float>(size_t(R))};
  ops::sample_tokens(ctx, tensor_i32(out.tokens.data(), {R}), tensor_f32(out.logprobs.data(), {R}),
                     tensor_f32(x.data(), {B, V}), tensor_i32(rows.data(), {R}), tensor_i64(streams.data(), {R}),
                     tensor_i64(counters.data(), {R}), p);
  return out;
}

Result sample_sharded(const ops::Ctx& ctx, const Comm& tp, std::vector<float>& shard, int64_t B, int64_t Vs,
                      std::vector<int32_t>& rows, std::vector<int64_t>& streams, std::vector<int64_t>& counters,
                      const ops::SamplingParams& p) {
  const int64_t R = int64_t(rows.size());
  Result out{std::vector<int32_t>(size_t(R), -7), std::vector<float>(size_t(R), -7.0f)};
  rollout::sample_tokens_tp(ctx, tp, tensor_i32(out.tokens.data(), {R}), tensor_f32(out.logprobs.data(), {R}),
                            tensor_f32(shard.data(), {B, Vs}), tensor_i32(rows.data(), {R}),
                            tensor_i64(streams.data(), {R}), tensor_i64(counters.data(), {R}), p,
                            int64_t(tp.rank()) * Vs);
  return out;
}

class SamplingTp : public testing::TestWithParam<int> {};  // tp; 0: the whole world

TEST_P(SamplingTp, EqualsTheUnshardedOp) {
  const Comm world = Comm::world();
  const int tp_size = GetParam() == 0 ? world.size() : GetParam();
  if (world.size() % tp_size != 0) GTEST_SKIP() << "tp " << tp_size << " does not divide " << world.size();
  const Comm tp = world.split(world.rank() / tp_size, world.rank());
  Arena arena(size_t(64) << 20, Device::cpu, "sampling-tp");
  ops::Ctx ctx;
  ctx.scratch = &arena;

  int64_t sampled = 0, differ = 0;
  for (const int64_t V : {int64_t(1000), int64_t(4096)}) {
    const int64_t B = 24, Vs = V / tp_size;
    for (const auto& c : test::tp_sampling_cases()) {
      SCOPED_TRACE(testing::Message() << "tp " << tp_size << " V " << V << " " << c.name);
      std::vector<float> x = test::tp_sampling_logits(B, V, c.coarse, 17 + uint32_t(V));
      std::vector<int32_t> rows;
      std::vector<int64_t> streams, counters;
      test::tp_sampling_rows(B, rows, streams, counters);
      const int64_t R = int64_t(rows.size());
      const Result want = sample_full(ctx, x, B, V, rows, streams, counters, c.p);
      std::vector<float> shard = test::tp_shard(x, B, V, tp_size, tp.rank());
      const Result got = sample_sharded(ctx, tp, shard, B, Vs, rows, streams, counters, c.p);
      EXPECT_EQ(arena.used(), 0u) << "scratch not released";

      // The same tokens and log-prob bits on every rank of the group.
      std::vector<int64_t> mx(size_t(2 * R)), mn;
      for (int64_t r = 0; r < R; ++r) {
        uint32_t bits;
        std::memcpy(&bits, &got.logprobs[size_t(r)], 4);
        mx[size_t(r)] = got.tokens[size_t(r)];
        mx[size_t(R + r)] = int64_t(bits);
      }
      mn = mx;
      tp.all_reduce_i64(mx, ReduceOp::max);
      tp.all_reduce_i64(mn, ReduceOp::min);
      ASSERT_EQ(mx, mn) << "tp ranks disagree";

      for (int64_t r = 0; r < R; ++r) {
        ASSERT_GE(got.tokens[size_t(r)], 0);
        ASSERT_LT(got.tokens[size_t(r)], V);
        ASSERT_TRUE(std::isfinite(got.logprobs[size_t(r)]));
        if (got.tokens[size_t(r)] != want.tokens[size_t(r)]) {
          ++differ;
          continue;
        }
        EXPECT_NEAR(got.logprobs[size_t(r)], want.logprobs[size_t(r)], 2e-6 + 1e-6 * std::fabs(want.logprobs[size_t(r)]))
            << "row " << r;
      }
      if (c.p.temperature == 0.0f || c.p.top_k == 1 || c.p.top_p == 1.0f)
        ;  // counted below: the CDF walk's rounding is the only allowed difference
      sampled += R;
    }
  }
  // Differences only where u lands within float rounding of a boundary:
  // none expected on these few thousand rows.
  EXPECT_EQ(differ, 0) << "of " << sampled << " sampled rows";
}

TEST(SamplingTp1, IsSampleTokens) {
  const Comm world = Comm::world();
  const Comm one = world.split(world.rank(), 0);
  Arena arena(size_t(64) << 20, Device::cpu, "sampling-tp1");
  ops::Ctx ctx;
  ctx.scratch = &arena;
  const int64_t B = 9, V = 777;
  for (const auto& c : test::tp_sampling_cases()) {
    std::vector<float> x = test::tp_sampling_logits(B, V, c.coarse, 5);
    std::vector<int32_t> rows;
    std::vector<int64_t> streams, counters;
    test::tp_sampling_rows(B, rows, streams, counters);
    const Result want = sample_full(ctx, x, B, V, rows, streams, counters, c.p);
    const Result got = sample_sharded(ctx, one, x, B, V, rows, streams, counters, c.p);
    EXPECT_EQ(got.tokens, want.tokens) << c.name;
    EXPECT_EQ(std::memcmp(got.logprobs.data(), want.logprobs.data(), want.logprobs.size() * 4), 0) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, SamplingTp, testing::Values(2, 0));

}  // namespace
}  // namespace dapo
