// The fused q/k/v product + RoPE + KV-cache write on the GPU: the same bits as
// linear_forward_multi then rope_kv_write (q, k, v, both caches) at the
// Qwen2.5 0.5B / 1.5B / 7B shapes and 1..256 tokens, slots shuffled over a
// pool with some -1, positions up to 32k; every plan the fused kernel can
// take (configurations remapped to whole-head tiles, 1..8 K splits) against
// the skinny product under the plan it stands for; and against the CPU op
// within bf16 tolerance.
#include "dapo/ops/qkv_rope_kv_write.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>

#include "dapo/ops/copy.h"
#include "dapo/ops/cuda_graph.h"
#include "dapo/ops/linear_multi.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/rope_kv_write.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

namespace detail = ops::cuda::detail;

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

struct Shape {
  int64_t Hq, Hkv, D, C;
};
constexpr Shape kQwen05{14, 2, 64, 896}, kQwen15{12, 2, 128, 1536}, kQwen7{28, 4, 128, 3584};

class QkvRopeKvWriteGpu : public GpuTest {
 protected:
  struct Case {
    int64_t T, NB, BS;
    Shape s;
    Tensor in, wq, wk, wv, bq, bk, bv, pos, slots;
    std::vector<float> kc0, vc0;  // the caches before the call
    std::vector<float> h_in, h_wq, h_wk, h_wv, h_bq, h_bk, h_bv;
    std::vector<int32_t> h_pos, h_slots;
  };

  Case make(int64_t T, Shape s, uint32_t seed) {
    Case c;
    c.T = T, c.s = s, c.BS = 16, c.NB = (2 * T + 40) / 16 + 1;
    std::mt19937 gen(seed);
    c.h_pos.resize(size_t(T));
    c.h_slots.resize(size_t(T));
    std::vector<int32_t> all(size_t(c.NB * c.BS));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    for (int64_t i = 0; i < T; ++i) {
      c.h_pos[size_t(i)] = i == 0 ? 0 : i == 1 ? 32767 : int32_t(gen() % 32768);
      c.h_slots[size_t(i)] = i % 7 == 2 ? -1 : all[size_t(i)];
    }
    const float w = 1.0f / std::sqrt(float(s.C));
    c.h_in = random_bf16_exact(size_t(T * s.C), seed + 1, -2, 2);
    c.h_wq = random_bf16_exact(size_t(s.Hq * s.D * s.C), seed + 2, -w, w);
    c.h_wk = random_bf16_exact(size_t(s.Hkv * s.D * s.C), seed + 3, -w, w);
    c.h_wv = random_bf16_exact(size_t(s.Hkv * s.D * s.C), seed + 4, -w, w);
    c.h_bq = random_bf16_exact(size_t(s.Hq * s.D), seed + 5);
    c.h_bk = random_bf16_exact(size_t(s.Hkv * s.D), seed + 6);
    c.h_bv = random_bf16_exact(size_t(s.Hkv * s.D), seed + 7);
    c.in = upload(c.h_in, {T, s.C}, DType::bf16);
    c.wq = upload(c.h_wq, {s.Hq * s.D, s.C}, DType::bf16);
    c.wk = upload(c.h_wk, {s.Hkv * s.D, s.C}, DType::bf16);
    c.wv = upload(c.h_wv, {s.Hkv * s.D, s.C}, DType::bf16);
    c.bq = upload(c.h_bq, {s.Hq * s.D}, DType::bf16);
    c.bk = upload(c.h_bk, {s.Hkv * s.D}, DType::bf16);
    c.bv = upload(c.h_bv, {s.Hkv * s.D}, DType::bf16);
    c.pos = upload_raw(c.h_pos, {T});
    c.slots = upload_raw(c.h_slots, {T});
    c.kc0 = random_bf16_exact(size_t(c.NB * c.BS * s.Hkv * s.D), seed + 8);
    c.vc0 = random_bf16_exact(c.kc0.size(), seed + 9);
    return c;
  }

  struct Out {
    Tensor q, k, v, kc, vc;
    std::vector<ops::LinearSegment> segs;
  };
  std::vector<std::vector<float>> host(const Out& o) {
    return {download(o.q), download(o.k), download(o.v), download(o.kc), download(o.vc)};
  }
  Out outputs(const Case& c) {
    Out o;
    const Shape& s = c.s;
    o.q = guarded(DType::bf16, {c.T, s.Hq * s.D});
    o.k = guarded(DType::bf16, {c.T, s.Hkv * s.D});
    o.v = guarded(DType::bf16, {c.T, s.Hkv * s.D});
    o.kc = upload(c.kc0, {c.NB, c.BS, s.Hkv, s.D}, DType::bf16);
    o.vc = upload(c.vc0, {c.NB, c.BS, s.Hkv, s.D}, DType::bf16);
    o.segs = {{o.q, c.wq, c.bq}, {o.k, c.wk, c.bk}, {o.v, c.wv, c.bv}};
    return o;
  }
  // Guards checked, then the memory from `mark` on released.
  void release(size_t mark) {
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }

  // linear_forward_multi (under `plan` when given) then rope_kv_write.
  std::vector<std::vector<float>> unfused(const Case& c, const detail::SkinnyPlan* plan) {
    Out o = outputs(c);
    if (plan != nullptr) detail::linear_forward_multi_skinny(gpu(), c.in, o.segs, plan);
    else ops::linear_forward_multi(gpu(), c.in, o.segs);
    const Shape& s = c.s;
    ops::rope_kv_write(gpu(), o.q.reshape({c.T, s.Hq, s.D}), o.k.reshape({c.T, s.Hkv, s.D}), o.kc, o.vc,
                       o.v.reshape({c.T, s.Hkv, s.D}), c.pos, c.slots, ops::kRopeThetaQwen2);
    device_->synchronize();
    return host(o);
  }
};

constexpr const char* kNames[] = {"q", "k", "v", "k_cache", "v_cache"};

TEST_F(QkvRopeKvWriteGpu, OpMatchesTheTwoOpsBitForBit) {
  uint32_t seed = 100;
  int fused_calls = 0;
  for (const Shape s : {kQwen05, kQwen15, kQwen7})
    for (const int64_t T : {int64_t(1), int64_t(5), int64_t(17), int64_t(40), int64_t(64), int64_t(100),
                            int64_t(128), int64_t(256)}) {
      SCOPED_TRACE(testing::Message() << "T " << T << " Hq " << s.Hq << " D " << s.D);
      const size_t mark = arena_->mark();
      const Case c = make(T, s, seed += 10);
      const auto want = unfused(c, nullptr);
      Out o = outputs(c);
      ops::qkv_rope_kv_write(gpu(), c.in, o.segs, o.kc, o.vc, c.pos, c.slots, ops::kRopeThetaQwen2);
      device_->synchronize();
      const auto got = host(o);
      for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(got[size_t(i)], want[size_t(i)])) << kNames[i];
      if (detail::linear_multi_skinny_preferred(T, s.C, o.segs) &&
          detail::skinny_rope_plan(T, s.C, o.segs, s.D).config >= 0)
        ++fused_calls;
      release(mark);
      if (HasFailure()) return;
    }
  // The decode shapes take the fused launch (q/k/v is on the skinny path at
  // 1..128 rows).
  EXPECT_GE(fused_calls, 12);
}

TEST_F(QkvRopeKvWriteGpu, EveryFusedPlanMatchesItsProduct) {
  uint32_t seed = 900;
  for (const Shape s : {kQwen05, kQwen15})
    for (const int64_t T : {int64_t(3), int64_t(70), int64_t(200)}) {
      const size_t mark = arena_->mark();
      const Case c = make(T, s, seed += 10);
      const size_t plan_mark = arena_->mark();
      for (int config = 0; config < detail::skinny_config_count(); ++config)
        for (const int splits : {1, 3, 8}) {
          int bn = 0, bm = 0;
          detail::skinny_config_tile(config, bn, bm);
          if (bn % s.D != 0) continue;
          SCOPED_TRACE(testing::Message() << "T " << T << " D " << s.D << " config " << config << " splits "
                                          << splits);
          const detail::SkinnyPlan plan{config, splits, false, true, 0};
          const auto want = unfused(c, &plan);
          Out o = outputs(c);
          detail::linear_forward_multi_skinny_rope(gpu(), c.in, o.segs, o.kc, o.vc, c.pos, c.slots,
                                                   ops::kRopeThetaQwen2, plan);
          device_->synchronize();
          const auto got = host(o);
          for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(got[size_t(i)], want[size_t(i)])) << kNames[i];
          release(plan_mark);
          if (HasFailure()) return;
        }
      release(mark);
    }
}

TEST_F(QkvRopeKvWriteGpu, MatchesCpu) {
  const Case c = make(33, kQwen05, 4242);
  Out o = outputs(c);
  ops::qkv_rope_kv_write(gpu(), c.in, o.segs, o.kc, o.vc, c.pos, c.slots, ops::kRopeThetaQwen2);
  device_->synchronize();
  const auto got = host(o);
  const Shape& s = c.s;
  std::vector<float> q(got[0].size()), k(got[1].size()), v(got[2].size()), kc = c.kc0, vc = c.vc0;
  auto h = [](std::vector<float>& x, std::initializer_list<int64_t> d) { return Tensor(x.data(), DType::f32, d); };
  Case m = c;  // host copies of the inputs
  const int64_t Nq = s.Hq * s.D, Nkv = s.Hkv * s.D;
  const std::vector<ops::LinearSegment> segs = {{h(q, {c.T, Nq}), h(m.h_wq, {Nq, s.C}), h(m.h_bq, {Nq})},
                                                {h(k, {c.T, Nkv}), h(m.h_wk, {Nkv, s.C}), h(m.h_bk, {Nkv})},
                                                {h(v, {c.T, Nkv}), h(m.h_wv, {Nkv, s.C}), h(m.h_bv, {Nkv})}};
  ops::qkv_rope_kv_write(cpu(), h(m.h_in, {c.T, s.C}), segs, h(kc, {c.NB, c.BS, s.Hkv, s.D}),
                         h(vc, {c.NB, c.BS, s.Hkv, s.D}), Tensor(m.h_pos.data(), DType::i32, {c.T}),
                         Tensor(m.h_slots.data(), DType::i32, {c.T}), ops::kRopeThetaQwen2);
  expect_close(got[0], q, 3e-2, 2e-2, "q");
  expect_close(got[1], k, 3e-2, 2e-2, "k");
  expect_close(got[2], v, 3e-2, 2e-2, "v");
  expect_close(got[3], kc, 3e-2, 2e-2, "k_cache");
  expect_close(got[4], vc, 3e-2, 2e-2, "v_cache");
}

// The fused op against linear_forward_multi + rope_kv_write, each replayed
// from a CUDA graph of one call per layer over enough weight copies to
// leave L2 cold (as in a decode step), Qwen2.5 shapes at 32-256 rows.
TEST_F(QkvRopeKvWriteGpu, Perf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  Arena big(size_t(3) << 30, Device::cuda, "qkv-rope-perf");
  for (const Shape s : {kQwen05, kQwen15, kQwen7})
    for (const int64_t B : {int64_t(32), int64_t(64), int64_t(128), int64_t(256)}) {
      ArenaScope scope(big);
      const int64_t Nq = s.Hq * s.D, Nkv = s.Hkv * s.D, BS = 16, NB = 4096;
      const double bytes = 2.0 * double(Nq + 2 * Nkv) * double(s.C);
      const int layers = int(std::max(4.0, std::ceil(200e6 / bytes)));
      std::vector<std::vector<ops::LinearSegment>> segs(static_cast<size_t>(layers));
      Tensor in = big.alloc(DType::bf16, {B, s.C});
      Tensor q = big.alloc(DType::bf16, {B, Nq}), k = big.alloc(DType::bf16, {B, Nkv});
      Tensor v = big.alloc(DType::bf16, {B, Nkv});
      Tensor kc = big.alloc(DType::bf16, {NB, BS, s.Hkv, s.D}), vc = big.alloc(DType::bf16, {NB, BS, s.Hkv, s.D});
      fill_random(*device_, in, 1);
      for (int l = 0; l < layers; ++l) {
        Tensor wq = big.alloc(DType::bf16, {Nq, s.C}), wk = big.alloc(DType::bf16, {Nkv, s.C});
        Tensor wv = big.alloc(DType::bf16, {Nkv, s.C}), bq = big.alloc(DType::bf16, {Nq});
        Tensor bk = big.alloc(DType::bf16, {Nkv}), bv = big.alloc(DType::bf16, {Nkv});
        for (const Tensor& t : {wq, wk, wv, bq, bk, bv}) fill_random(*device_, t, uint32_t(l + 2), -0.05f, 0.05f);
        segs[size_t(l)] = {{q, wq, bq}, {k, wk, bk}, {v, wv, bv}};
      }
      std::vector<int32_t> pos(static_cast<size_t>(B)), slots(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) pos[size_t(b)] = int32_t(300 + b), slots[size_t(b)] = int32_t(b * 37);
      const Tensor gpos = upload_raw(pos, {B}), gslots = upload_raw(slots, {B});
      const auto per_layer_us = [&](const std::function<void(int)>& one) {
        one(0);  // plans and kernel attributes outside the capture
        ops::stream_synchronize(ctx);
        const ops::CapturedGraph graph = ops::CapturedGraph::capture(ctx, [&] {
          for (int l = 0; l < layers; ++l) one(l);
        });
        const double ms = time_ms(ctx.stream, [&] { graph.launch(ctx); }, 10, 3);
        return ms * 1e3 / layers;
      };
      const double fused_us = per_layer_us([&](int l) {
        ops::qkv_rope_kv_write(ctx, in, segs[size_t(l)], kc, vc, gpos, gslots, ops::kRopeThetaQwen2);
      });
      const double two_us = per_layer_us([&](int l) {
        ops::linear_forward_multi(ctx, in, segs[size_t(l)]);
        ops::rope_kv_write(ctx, q.reshape({B, s.Hq, s.D}), k.reshape({B, s.Hkv, s.D}), kc, vc,
                           v.reshape({B, s.Hkv, s.D}), gpos, gslots, ops::kRopeThetaQwen2);
      });
      const bool fused = detail::linear_multi_skinny_preferred(B, s.C, segs[0]) &&
                         detail::skinny_rope_plan(B, s.C, segs[0], s.D).config >= 0;
      std::printf("{\"op\":\"qkv_rope_kv_write\",\"shape\":\"B=%lld,Hq=%lld,Hkv=%lld,D=%lld,C=%lld\","
                  "\"fused_launch\":%s,\"op_us\":%.2f,\"two_ops_us\":%.2f}\n",
                  (long long)B, (long long)s.Hq, (long long)s.Hkv, (long long)s.D, (long long)s.C,
                  fused ? "true" : "false", fused_us, two_us);
      std::fflush(stdout);
    }
}

}  // namespace
}  // namespace dapo::test
