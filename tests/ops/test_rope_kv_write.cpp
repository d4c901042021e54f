// The fused decode-step RoPE + KV cache write equals its definition, the
// three CPU ops in sequence, bit for bit: q and k rotated in place, the
// rotated k and v at their slots (skipped slots and the rest of the pool
// untouched); an empty batch; aliasing and mixed dtypes refused. With
// Qwen3's head norm: rmsnorm_forward on the head rows of q and k first, bit
// for bit; malformed norm weights and eps refused.
#include "dapo/ops/rope.h"

#include <algorithm>
#include <numeric>

#include "dapo/ops/kv_cache.h"
#include "dapo/ops/rmsnorm.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

struct Case {
  int64_t T, Hq, Hkv, D, num_blocks, block_size;
};

// rmsnorm_forward of x's (rows, D) head rows, out of place (the op's
// contract), copied back.
void norm_rows(const ops::Ctx& ctx, std::vector<float>& x, std::vector<float>& w, int64_t D, float eps) {
  const int64_t rows = int64_t(x.size()) / D;
  std::vector<float> out(x.size()), rstd(static_cast<size_t>(rows));
  ops::rmsnorm_forward(ctx, tensor_f32(out.data(), {rows, D}), tensor_f32(rstd.data(), {rows}),
                       tensor_f32(x.data(), {rows, D}), tensor_f32(w.data(), {D}), eps);
  x = out;
}

// The op against its definition; with head_norm, Qwen3's norm of q's and
// k's head rows first.
void run_case(const Case& c, uint32_t seed, bool head_norm = false) {
  SCOPED_TRACE(testing::Message() << (head_norm ? "head norm, " : "") << "T " << c.T << " Hq " << c.Hq << " Hkv "
                                  << c.Hkv << " D " << c.D);
  const int64_t T = c.T, slots_total = c.num_blocks * c.block_size;
  auto [pos, slots] = test::random_positions_and_slots(T, slots_total, seed);
  const int64_t cache_n = slots_total * c.Hkv * c.D;
  auto q = test::random_vector(size_t(T * c.Hq * c.D), seed + 1, -2, 2);
  auto k = test::random_vector(size_t(T * c.Hkv * c.D), seed + 2, -2, 2);
  auto v = test::random_vector(k.size(), seed + 3, -2, 2);
  auto kc = test::random_vector(size_t(cache_n), seed + 4), vc = test::random_vector(size_t(cache_n), seed + 5);
  auto wq = test::random_vector(size_t(c.D), seed + 6, 0.5f, 1.5f), wk = test::random_vector(size_t(c.D), seed + 7);
  const float eps = 1e-6f;
  auto q2 = q, k2 = k, kc2 = kc, vc2 = vc;
  const auto v_before = v;

  const ops::Ctx ctx = test::cpu_ctx();
  auto qt = [&](std::vector<float>& x) { return tensor_f32(x.data(), {T, c.Hq, c.D}); };
  auto kt = [&](std::vector<float>& x) { return tensor_f32(x.data(), {T, c.Hkv, c.D}); };
  auto ct = [&](std::vector<float>& x) { return tensor_f32(x.data(), {c.num_blocks, c.block_size, c.Hkv, c.D}); };
  Tensor tp = tensor_i32(pos.data(), {T}), ts = tensor_i32(slots.data(), {T});
  if (head_norm) {
    norm_rows(ctx, q, wq, c.D, eps);
    norm_rows(ctx, k, wk, c.D, eps);
  }
  ops::rope_forward(ctx, qt(q), qt(q), tp, ops::kRopeThetaQwen2);
  ops::rope_forward(ctx, kt(k), kt(k), tp, ops::kRopeThetaQwen2);
  ops::kv_cache_write(ctx, ct(kc), ct(vc), kt(k), kt(v), ts);
  const ops::HeadNorm hn =
      head_norm ? ops::HeadNorm{tensor_f32(wq.data(), {c.D}), tensor_f32(wk.data(), {c.D}), eps} : ops::HeadNorm{};
  ops::rope_kv_write(ctx, qt(q2), kt(k2), ct(kc2), ct(vc2), kt(v), tp, ts, ops::kRopeThetaQwen2, hn);
  EXPECT_EQ(q2, q);
  EXPECT_EQ(k2, k);
  EXPECT_EQ(kc2, kc);
  EXPECT_EQ(vc2, vc);
  EXPECT_EQ(v, v_before);
}

TEST(RopeKvWrite, EqualsRopeTwiceThenKvCacheWrite) {
  run_case({5, 14, 2, 64, 4, 16}, 1);    // Qwen2.5-0.5B heads
  run_case({37, 12, 2, 128, 5, 16}, 2);  // 1.5B
  run_case({9, 28, 4, 128, 2, 8}, 3);    // 7B
  run_case({11, 3, 1, 6, 3, 5}, 4);      // odd half, odd block size
  run_case({0, 14, 2, 64, 2, 16}, 5);    // empty batch
}

TEST(RopeKvWrite, HeadNormEqualsRmsnormThenTheThreeOps) {
  run_case({5, 16, 8, 128, 4, 16}, 11, true);  // Qwen3-0.6B / 1.7B heads
  run_case({7, 2, 1, 64, 2, 8}, 12, true);
  run_case({11, 3, 1, 6, 3, 5}, 13, true);     // odd half, odd block size
  run_case({0, 16, 8, 128, 2, 16}, 14, true);  // empty batch
}

TEST(RopeKvWriteDeathTest, RefusesMalformedHeadNorm) {
  std::vector<float> q(2 * 2 * 4), k(2 * 1 * 4), v(k.size()), kc(2 * 2 * 1 * 4), vc(kc.size()), w(4), w3(3);
  std::vector<int32_t> pos{0, 1}, slots{0, 1};
  auto run = [&](const ops::HeadNorm& hn) {
    ops::rope_kv_write(test::cpu_ctx(), tensor_f32(q.data(), {2, 2, 4}), tensor_f32(k.data(), {2, 1, 4}),
                       tensor_f32(kc.data(), {2, 2, 1, 4}), tensor_f32(vc.data(), {2, 2, 1, 4}),
                       tensor_f32(v.data(), {2, 1, 4}), tensor_i32(pos.data(), {2}), tensor_i32(slots.data(), {2}),
                       ops::kRopeThetaQwen2, hn);
  };
  const Tensor wt = tensor_f32(w.data(), {4});
  EXPECT_EXIT(run({wt, tensor_f32(w3.data(), {3}), 1e-6f}), testing::ExitedWithCode(1),
              "rope_kv_write: hn.k_weight has shape \\(3\\), expected \\(4\\)");
  EXPECT_EXIT(run({Tensor(w.data(), DType::bf16, {4}), wt, 1e-6f}), testing::ExitedWithCode(1),
              "rope_kv_write: hn.q_weight is bf16, expected f32");
  EXPECT_EXIT(run({wt, Tensor{}, 1e-6f}), testing::ExitedWithCode(1), "rope_kv_write: hn.q_weight without hn.k_weight");
  EXPECT_EXIT(run({Tensor{}, wt, 1e-6f}), testing::ExitedWithCode(1),
              "rope_kv_write: hn.k_weight without hn.q_weight");
  EXPECT_EXIT(run({wt, wt, 0.0f}), testing::ExitedWithCode(1), "rope_kv_write: hn.eps 0 must be positive");
  // A weight inside k, which the op writes.
  EXPECT_EXIT(run({wt, tensor_f32(k.data(), {4}), 1e-6f}), testing::ExitedWithCode(1),
              "rope_kv_write: hn.k_weight overlaps k");
}

TEST(RopeKvWriteDeathTest, RefusesAliasingAndMixedDtypes) {
  std::vector<float> q(2 * 2 * 4), cache(2 * 2 * 1 * 4), v(2 * 1 * 4);
  std::vector<int32_t> pos{0, 1}, slots{0, 1};
  std::vector<float> kc(cache.size());
  // k a view of q's first elements.
  EXPECT_EXIT(ops::rope_kv_write(test::cpu_ctx(), tensor_f32(q.data(), {2, 2, 4}), tensor_f32(q.data(), {2, 1, 4}),
                                 tensor_f32(kc.data(), {2, 2, 1, 4}), tensor_f32(cache.data(), {2, 2, 1, 4}),
                                 tensor_f32(v.data(), {2, 1, 4}), tensor_i32(pos.data(), {2}),
                                 tensor_i32(slots.data(), {2}), ops::kRopeThetaQwen2),
              testing::ExitedWithCode(1), "rope_kv_write: q overlaps k");
  std::vector<float> k(v.size());
  // The caches of another dtype than q.
  EXPECT_EXIT(ops::rope_kv_write(test::cpu_ctx(), tensor_f32(q.data(), {2, 2, 4}), tensor_f32(k.data(), {2, 1, 4}),
                                 Tensor(kc.data(), DType::bf16, {2, 2, 1, 4}), tensor_f32(cache.data(), {2, 2, 1, 4}),
                                 tensor_f32(v.data(), {2, 1, 4}), tensor_i32(pos.data(), {2}),
                                 tensor_i32(slots.data(), {2}), ops::kRopeThetaQwen2),
              testing::ExitedWithCode(1), "rope_kv_write: k_cache is bf16, expected f32");
}

}  // namespace
}  // namespace dapo
