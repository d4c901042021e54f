// The fused q/k/v product + RoPE + KV-cache write on the GPU beyond the
// comparison with the CPU (test_backend_ops_gemm.cpp): the same bits as
// linear_forward_multi then rope_kv_write (q, k, v, both caches) at the
// Qwen2.5 0.5B / 1.5B / 7B shapes and 1..256 tokens, slots shuffled over a
// pool with some -1, positions up to 32k; and every plan the fused kernel
// can take (configurations remapped to whole-head tiles, 1..8 K splits)
// against the skinny product under the plan it stands for. With Qwen3's head
// norm: the same bits as linear_forward_multi then rope_kv_write with it.
#include "dapo/ops/qkv_rope_kv_write.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>

#include "dapo/ops/copy.h"
#include "dapo/ops/cuda_graph.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/rope.h"
#include "gpu/gpu_test_util.h"
#include "cuda/cuda_ops.h"

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
constexpr Shape kQwen3_06{16, 8, 128, 1024};

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
  std::vector<std::vector<float>> unfused(const Case& c, const detail::SkinnyPlan* plan,
                                          const ops::HeadNorm& hn = {}) {
    Out o = outputs(c);
    if (plan != nullptr) detail::linear_forward_multi_skinny(gpu(), c.in, o.segs, plan);
    else ops::linear_forward_multi(gpu(), c.in, o.segs);
    const Shape& s = c.s;
    ops::rope_kv_write(gpu(), o.q.reshape({c.T, s.Hq, s.D}), o.k.reshape({c.T, s.Hkv, s.D}), o.kc, o.vc,
                       o.v.reshape({c.T, s.Hkv, s.D}), c.pos, c.slots, ops::kRopeThetaQwen2, hn);
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

// The head norm keeps the op off the fused epilogue: the product, then
// rope_kv_write with the norm.
TEST_F(QkvRopeKvWriteGpu, HeadNormMatchesTheTwoOpsBitForBit) {
  uint32_t seed = 500;
  for (const Shape s : {kQwen3_06, kQwen05})
    for (const int64_t T : {int64_t(1), int64_t(7), int64_t(64), int64_t(300)}) {
      SCOPED_TRACE(testing::Message() << "T " << T << " Hq " << s.Hq << " D " << s.D);
      const size_t mark = arena_->mark();
      const Case c = make(T, s, seed += 10);
      const ops::HeadNorm hn{upload(random_bf16_exact(size_t(s.D), seed + 1, 0.5f, 1.5f), {s.D}, DType::bf16),
                             upload(random_bf16_exact(size_t(s.D), seed + 2), {s.D}, DType::bf16), 1e-6f};
      const auto want = unfused(c, nullptr, hn);
      Out o = outputs(c);
      ops::qkv_rope_kv_write(gpu(), c.in, o.segs, o.kc, o.vc, c.pos, c.slots, ops::kRopeThetaQwen2, {}, hn);
      device_->synchronize();
      const auto got = host(o);
      for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(got[size_t(i)], want[size_t(i)])) << kNames[i];
      release(mark);
      if (HasFailure()) return;
    }
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

// A slot outside the pool (not -1) is bad metadata: nothing is written for
// it, and the device flag names the cache write, the token and the slot -
// on the fused product's epilogue (few tokens), the plain path (many), and
// with Qwen3's head norm. -1 alone raises nothing.
TEST_F(QkvRopeKvWriteGpu, SlotsOutsideThePoolRaiseTheDeviceFlag) {
  uint32_t seed = 900;
  for (const Shape s : {kQwen15, kQwen3_06})
    for (const int64_t T : {int64_t(3), int64_t(200)}) {
      SCOPED_TRACE(testing::Message() << "T " << T << " Hq " << s.Hq);
      const size_t mark = arena_->mark();
      Case c = make(T, s, seed += 10);
      const ops::HeadNorm hn =
          s.Hq == kQwen3_06.Hq
              ? ops::HeadNorm{upload(random_bf16_exact(size_t(s.D), seed + 20, 0.5f, 1.5f), {s.D}, DType::bf16),
                              upload(random_bf16_exact(size_t(s.D), seed + 21, 0.5f, 1.5f), {s.D}, DType::bf16), 1e-6f}
              : ops::HeadNorm{};
      device_->clear_flags();
      {
        Out o = outputs(c);
        ops::qkv_rope_kv_write(gpu(), c.in, o.segs, o.kc, o.vc, c.pos, c.slots, ops::kRopeThetaQwen2, {}, hn);
        device_->synchronize();
      }
      EXPECT_EQ(device_->read_flags().bad_id_count, 0) << "-1 slots are no error";
      const int32_t bad = int32_t(c.NB * c.BS + 7);
      c.h_slots[1] = bad;
      c.slots = upload_raw(c.h_slots, {T});
      Out o = outputs(c);
      ops::qkv_rope_kv_write(gpu(), c.in, o.segs, o.kc, o.vc, c.pos, c.slots, ops::kRopeThetaQwen2, {}, hn);
      device_->synchronize();
      const ops::DeviceFlags f = device_->read_flags();
      EXPECT_GE(f.bad_id_count, 1);
      EXPECT_EQ(ops::FlagSite(f.bad_id_site), ops::FlagSite::kv_slot);
      EXPECT_EQ(f.bad_id_row, 1);
      EXPECT_EQ(f.bad_id_value, bad);
      device_->clear_flags();
      release(mark);
    }
}

}  // namespace
}  // namespace dapo::test
