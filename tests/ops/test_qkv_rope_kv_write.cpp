// The fused q/k/v product, RoPE and KV-cache write equals its definition,
// linear_forward_multi then rope_kv_write, bit for bit on the CPU (skipped
// slots and the rest of the pool untouched; an empty batch), with Qwen3's
// head norm too; malformed segments, RoPE arguments and head norms are
// refused with the op's name.
#include "dapo/ops/qkv_rope_kv_write.h"

#include <algorithm>
#include <numeric>

#include "dapo/ops/rope.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

struct Case {
  int64_t T, C, Hq, Hkv, D, num_blocks, block_size;
};

// head_norm: with a HeadNorm of random weights.
void run_case(const Case& c, uint32_t seed, bool head_norm = false) {
  SCOPED_TRACE(testing::Message() << "T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D
                                  << (head_norm ? " head norm" : ""));
  const int64_t T = c.T, Nq = c.Hq * c.D, Nkv = c.Hkv * c.D, slots_total = c.num_blocks * c.block_size;
  auto [pos, slots] = test::random_positions_and_slots(T, slots_total, seed);
  auto in = test::random_vector(size_t(T * c.C), seed + 1);
  auto wq = test::random_vector(size_t(Nq * c.C), seed + 2), bq = test::random_vector(size_t(Nq), seed + 3);
  auto wk = test::random_vector(size_t(Nkv * c.C), seed + 4), bk = test::random_vector(size_t(Nkv), seed + 5);
  auto wv = test::random_vector(size_t(Nkv * c.C), seed + 6), bv = test::random_vector(size_t(Nkv), seed + 7);
  const int64_t cache_n = slots_total * Nkv;
  auto kc = test::random_vector(size_t(cache_n), seed + 8), vc = test::random_vector(size_t(cache_n), seed + 9);
  std::vector<float> q(size_t(T * Nq)), k(size_t(T * Nkv)), v(k.size());
  auto q2 = q, k2 = k, v2 = v, kc2 = kc, vc2 = vc;
  auto wqn = test::random_vector(size_t(c.D), seed + 10, 0.5f, 1.5f), wkn = test::random_vector(size_t(c.D), seed + 11);
  ops::HeadNorm hn;
  if (head_norm) hn = {tensor_f32(wqn.data(), {c.D}), tensor_f32(wkn.data(), {c.D}), 1e-6f};

  const ops::Ctx ctx = test::cpu_ctx();
  auto ct = [&](std::vector<float>& x) { return tensor_f32(x.data(), {c.num_blocks, c.block_size, c.Hkv, c.D}); };
  auto segs = [&](std::vector<float>& qo, std::vector<float>& ko, std::vector<float>& vo) {
    return std::vector<ops::LinearSegment>{
        {tensor_f32(qo.data(), {T, Nq}), tensor_f32(wq.data(), {Nq, c.C}), tensor_f32(bq.data(), {Nq})},
        {tensor_f32(ko.data(), {T, Nkv}), tensor_f32(wk.data(), {Nkv, c.C}), tensor_f32(bk.data(), {Nkv})},
        {tensor_f32(vo.data(), {T, Nkv}), tensor_f32(wv.data(), {Nkv, c.C}), tensor_f32(bv.data(), {Nkv})}};
  };
  const Tensor tin = tensor_f32(in.data(), {T, c.C}), tp = tensor_i32(pos.data(), {T}),
               ts = tensor_i32(slots.data(), {T});
  ops::linear_forward_multi(ctx, tin, segs(q, k, v));
  ops::rope_kv_write(ctx, tensor_f32(q.data(), {T, c.Hq, c.D}), tensor_f32(k.data(), {T, c.Hkv, c.D}), ct(kc), ct(vc),
                     tensor_f32(v.data(), {T, c.Hkv, c.D}), tp, ts, ops::kRopeThetaQwen2, hn);
  ops::qkv_rope_kv_write(ctx, tin, segs(q2, k2, v2), ct(kc2), ct(vc2), tp, ts, ops::kRopeThetaQwen2, {}, hn);
  EXPECT_EQ(q2, q);
  EXPECT_EQ(k2, k);
  EXPECT_EQ(v2, v);
  EXPECT_EQ(kc2, kc);
  EXPECT_EQ(vc2, vc);
}

TEST(QkvRopeKvWrite, EqualsLinearForwardMultiThenRopeKvWrite) {
  run_case({5, 32, 14, 2, 8, 4, 16}, 1);  // Qwen2.5-0.5B's head counts
  run_case({9, 24, 4, 4, 6, 3, 5}, 2);    // MHA, odd half, odd block size
  run_case({0, 16, 2, 1, 4, 2, 8}, 3);    // empty batch
}

TEST(QkvRopeKvWrite, HeadNormEqualsLinearForwardMultiThenRopeKvWrite) {
  run_case({7, 48, 16, 8, 16, 4, 16}, 21, true);  // Qwen3's head counts
  run_case({9, 24, 4, 4, 6, 3, 5}, 22, true);     // MHA, odd half, odd block size
  run_case({0, 16, 2, 1, 4, 2, 8}, 23, true);     // empty batch
}

TEST(QkvRopeKvWriteDeathTest, RefusesMalformedArguments) {
  std::vector<float> in(2 * 8), w(8 * 8), q(2 * 8), k(2 * 4), v(2 * 4), kc(2 * 2 * 1 * 4), vc(kc.size());
  std::vector<int32_t> pos{0, 1}, slots{0, 1};
  const ops::Ctx ctx = test::cpu_ctx();
  auto run = [&](std::vector<ops::LinearSegment> segs) {
    ops::qkv_rope_kv_write(ctx, tensor_f32(in.data(), {2, 8}), segs, tensor_f32(kc.data(), {2, 2, 1, 4}),
                           tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_i32(pos.data(), {2}),
                           tensor_i32(slots.data(), {2}), ops::kRopeThetaQwen2);
  };
  const ops::LinearSegment sq{tensor_f32(q.data(), {2, 8}), tensor_f32(w.data(), {8, 8}), Tensor{}};
  const ops::LinearSegment sk{tensor_f32(k.data(), {2, 4}), tensor_f32(w.data(), {4, 8}), Tensor{}};
  const ops::LinearSegment sv{tensor_f32(v.data(), {2, 4}), tensor_f32(w.data(), {4, 8}), Tensor{}};
  EXPECT_EXIT(run({sq, sk}), testing::ExitedWithCode(1), "qkv_rope_kv_write: 2 segments, expected q, k and v");
  // q of 6 columns: not whole heads of 4.
  const ops::LinearSegment odd{tensor_f32(q.data(), {2, 6}), tensor_f32(w.data(), {6, 8}), Tensor{}};
  EXPECT_EXIT(run({odd, sk, sv}), testing::ExitedWithCode(1), "qkv_rope_kv_write: output .* is not rows of heads");
  // rope_kv_write's contract on the products' heads, in this op's name.
  EXPECT_EXIT(ops::qkv_rope_kv_write(ctx, tensor_f32(in.data(), {2, 8}), std::vector<ops::LinearSegment>{sq, sk, sv},
                                     tensor_f32(kc.data(), {2, 2, 1, 4}), tensor_f32(vc.data(), {2, 2, 1, 4}),
                                     tensor_i32(pos.data(), {2}), tensor_i32(slots.data(), {2}), 0.0f),
              testing::ExitedWithCode(1), "qkv_rope_kv_write: theta 0 must be positive");
  // The head norm's contract (rope_kv_write's), in this op's name.
  std::vector<float> wn(4), wn8(8);
  auto run_norm = [&](const ops::HeadNorm& hn) {
    ops::qkv_rope_kv_write(ctx, tensor_f32(in.data(), {2, 8}), std::vector<ops::LinearSegment>{sq, sk, sv},
                           tensor_f32(kc.data(), {2, 2, 1, 4}), tensor_f32(vc.data(), {2, 2, 1, 4}),
                           tensor_i32(pos.data(), {2}), tensor_i32(slots.data(), {2}), ops::kRopeThetaQwen2, {}, hn);
  };
  const Tensor wt = tensor_f32(wn.data(), {4});
  EXPECT_EXIT(run_norm({tensor_f32(wn8.data(), {8}), wt, 1e-6f}), testing::ExitedWithCode(1),
              "qkv_rope_kv_write: hn.q_weight has shape \\(8\\), expected \\(4\\)");
  EXPECT_EXIT(run_norm({wt, Tensor(wn.data(), DType::bf16, {4}), 1e-6f}), testing::ExitedWithCode(1),
              "qkv_rope_kv_write: hn.k_weight is bf16, expected f32");
  EXPECT_EXIT(run_norm({wt, wt, -1.0f}), testing::ExitedWithCode(1), "qkv_rope_kv_write: hn.eps -1 must be positive");
  EXPECT_EXIT(run_norm({tensor_f32(q.data() + 4, {4}), wt, 1e-6f}), testing::ExitedWithCode(1),
              "qkv_rope_kv_write: hn.q_weight overlaps q");
}

}  // namespace
}  // namespace dapo
