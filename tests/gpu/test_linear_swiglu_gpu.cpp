// The fused gate/up products + SwiGLU on the GPU: every tile of the fused
// kernel and the op as routed against the CPU reference, the same bits on
// a rerun, and (DAPO_GPU_PERF=1) its speed against the two ops it replaces.
#include "dapo/ops/linear_swiglu.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "dapo/ops/linear_multi.h"
#include "dapo/ops/swiglu.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

namespace cd = ops::cuda::detail;

class LinearSwigluGpu : public GpuTest {
 protected:
  struct Case {
    int64_t M, K, I;
    std::vector<float> gate, up, want;  // the CPU's f32 products and h
    Tensor in, wg, wu;
  };

  Case make_case(int64_t M, int64_t K, int64_t I, uint32_t seed) {
    Case c{M, K, I, {}, {}, {}, {}, {}, {}};
    const auto in = random_bf16_exact(size_t(M * K), seed);
    // Weights scaled so that the products spread over SiLU's curved part.
    const float w = 3.0f / std::sqrt(float(K));
    const auto wg = random_bf16_exact(size_t(I * K), seed + 1, -w, w), wu = random_bf16_exact(size_t(I * K), seed + 2);
    c.gate.assign(size_t(M * I), 0.0f);
    c.up.assign(size_t(M * I), 0.0f);
    c.want.assign(size_t(M * I), 0.0f);
    ops::linear_swiglu_forward(cpu(), tensor_f32(c.want.data(), {M, I}), tensor_f32(c.gate.data(), {M, I}),
                               tensor_f32(c.up.data(), {M, I}), tensor_f32(const_cast<float*>(in.data()), {M, K}),
                               tensor_f32(const_cast<float*>(wg.data()), {I, K}),
                               tensor_f32(const_cast<float*>(wu.data()), {I, K}));
    c.in = upload(in, {M, K}, DType::bf16);
    c.wg = upload(wg, {I, K}, DType::bf16);
    c.wu = upload(wu, {I, K}, DType::bf16);
    return c;
  }

  // The GPU rounds each product to bf16 before SwiGLU (as the unfused path
  // stores it) and h once more: allow 2^-8 of |h| for the output and 2^-8 of
  // each product's share of h (SiLU's slope is at most 1.1), plus the fp32
  // sums' order.
  void expect_matches(const Case& c, const Tensor& h, const char* what) {
    const std::vector<float> got = download(h);
    size_t bad = 0;
    for (size_t i = 0; i < got.size() && bad < 10; ++i) {
      const double g = c.gate[i], u = c.up[i], want = c.want[i];
      const double allow = 1e-6 + 4e-7 * double(c.K) + 0x1p-7 * std::fabs(want) + 0x1p-8 * 1.1 * std::fabs(g * u);
      if (!(std::fabs(got[i] - want) <= allow)) {
        ADD_FAILURE() << what << " M " << c.M << " K " << c.K << " I " << c.I << " [" << i << "]: gpu " << got[i]
                      << " cpu " << want << " (gate " << g << ", up " << u << ")";
        ++bad;
      }
    }
  }
};

// Every width at 64 and 128 input rows a CTA, with either ring, on shapes
// with partial tiles (rows past M, columns past I, K not a multiple of 64),
// twice: the same bits both times, and with both rings.
TEST_F(LinearSwigluGpu, EveryTileMatchesCpu) {
  struct Shape {
    int64_t M, K, I;
  };
  uint32_t seed = 10;
  for (const Shape s : {Shape{1, 64, 40}, Shape{37, 136, 100}, Shape{64, 896, 96}, Shape{100, 200, 300},
                        Shape{128, 896, 200}, Shape{200, 96, 72}}) {
    const size_t mark = arena_->mark();
    const Case c = make_case(s.M, s.K, s.I, seed += 10);
    std::vector<unsigned char> shallow;  // the bits of the tile with the 112 KB ring
    for (const int rows : {64, 128})
      for (const int cols : cd::linear_swiglu_widths())
        for (const bool deep : {false, true}) {
          SCOPED_TRACE(testing::Message() << "rows " << rows << " cols " << cols << " deep " << deep);
          const cd::SwigluPlan plan{cols, rows, deep};
          Tensor h = guarded(DType::bf16, {s.M, s.I});
          cd::linear_swiglu_fused(gpu(), h, c.in, c.wg, c.wu, &plan);
          device_->synchronize();
          expect_matches(c, h, "fused");
          const auto first = bits(h);
          cd::linear_swiglu_fused(gpu(), h, c.in, c.wg, c.wu, &plan);
          device_->synchronize();
          EXPECT_TRUE(bits(h) == first) << "a rerun changed the bits";
          if (!deep) shallow = first;
          else EXPECT_TRUE(first == shallow) << "the deep ring changed the bits";
          check_guards();
          if (HasFailure()) return;
        }
    guards_.clear();
    arena_->reset(mark);
  }
}

// The op as routed (fused up to its row bound, the two ops beyond) on
// Qwen2.5-0.5B's MLP shape.
TEST_F(LinearSwigluGpu, RoutedMatchesCpu) {
  for (const int64_t M : {int64_t(0), int64_t(1), int64_t(17), int64_t(128), int64_t(129), int64_t(300),
                          int64_t(1100)}) {
    SCOPED_TRACE(testing::Message() << "M " << M);
    const size_t mark = arena_->mark();
    const Case c = make_case(M, 896, 4864, 77 + uint32_t(M));
    Tensor h = guarded(DType::bf16, {M, 4864});
    Tensor gate = device_empty(DType::bf16, {M, 4864}), up = device_empty(DType::bf16, {M, 4864});
    ops::linear_swiglu_forward(gpu(), h, gate, up, c.in, c.wg, c.wu);
    device_->synchronize();
    expect_matches(c, h, "routed");
    check_guards();
    guards_.clear();
    arena_->reset(mark);
    if (HasFailure()) return;
  }
}

// The wide (prefill) kernel on shapes with partial tiles: rows past M,
// columns past I (I % 8 != 0: direct stores instead of the TMA store; odd
// I: one value a store), K not a multiple of 64; a rerun gives the same bits.
TEST_F(LinearSwigluGpu, WideMatchesCpu) {
  if (!cd::linear_swiglu_wide_preferred(4096, 896, 4864)) GTEST_SKIP() << "no sm_90a build";
  struct Shape {
    int64_t M, K, I;
  };
  uint32_t seed = 500;
  for (const Shape s : {Shape{300, 136, 200}, Shape{129, 64, 131}, Shape{1100, 896, 4864}, Shape{40, 200, 300},
                        Shape{520, 72, 136}}) {
    SCOPED_TRACE(testing::Message() << "M " << s.M << " K " << s.K << " I " << s.I);
    const size_t mark = arena_->mark();
    const Case c = make_case(s.M, s.K, s.I, seed += 10);
    Tensor h = guarded(DType::bf16, {s.M, s.I});
    cd::linear_swiglu_wide(gpu(), h, c.in, c.wg, c.wu);
    device_->synchronize();
    expect_matches(c, h, "wide");
    const auto first = bits(h);
    cd::linear_swiglu_wide(gpu(), h, c.in, c.wg, c.wu);
    device_->synchronize();
    EXPECT_TRUE(bits(h) == first) << "a rerun changed the bits";
    check_guards();
    if (HasFailure()) return;
    guards_.clear();
    arena_->reset(mark);
  }
}

// The CUDA op's own checks: a wrong shape or an aliased output is named.
TEST_F(LinearSwigluGpu, BadArgumentsAreRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int64_t M = 4, K = 64, I = 40;
  const Case c = make_case(M, K, I, 321);
  Tensor h = device_empty(DType::bf16, {M, I}), g = device_empty(DType::bf16, {M, I}), u = device_empty(DType::bf16, {M, I});
  EXPECT_DEATH(ops::linear_swiglu_forward(gpu(), device_empty(DType::bf16, {M, I - 8}), g, u, c.in, c.wg, c.wu),
               "h has shape");
  EXPECT_DEATH(ops::linear_swiglu_forward(gpu(), h, g, u, c.in, c.wg, Tensor(c.wu.data, DType::bf16, {I - 8, K}, Device::cuda)),
               "w_up has shape");
  // h on top of the input (a (4, 40) view of in's first elements).
  EXPECT_DEATH(ops::linear_swiglu_forward(gpu(), Tensor(c.in.data, DType::bf16, {M, I}, Device::cuda), g, u, c.in,
                                          c.wg, c.wu),
               "overlaps");
}

// Speed: the fused launch against the gate/up product (as linear_forward_multi
// routes it) then swiglu_forward, on Qwen2.5 MLP shapes, in CUDA graphs of
// `calls` back-to-back calls whose weights rotate through ~1 GB (cold L2).
TEST_F(LinearSwigluGpu, DecodePerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  std::printf("{\"device\":\"%s\"}\n", device_->name().c_str());
  Arena big(size_t(3) << 30, Device::cuda, "linear-swiglu-perf");
  const int64_t pool_elems = int64_t(480) << 20;
  const Tensor pool = big.alloc(DType::bf16, {pool_elems});
  fill_random(*device_, pool, 3, -0.05f, 0.05f);
  struct Model {
    const char* name;
    int64_t K, I;
  };
  const Model models[] = {{"qwen2.5-0.5b", 896, 4864},
                          {"qwen2.5-1.5b", 1536, 8960},
                          {"qwen2.5-7b-tp2", 3584, 9472},
                          {"qwen2.5-7b", 3584, 18944}};
  const ops::Ctx ctx = gpu();
  for (const Model& m : models)
    for (const int64_t M : {int64_t(1), int64_t(8), int64_t(32), int64_t(64), int64_t(128), int64_t(256)}) {
      ArenaScope scope(big);
      Tensor in = big.alloc(DType::bf16, {M, m.K}), h = big.alloc(DType::bf16, {M, m.I});
      Tensor gate = big.alloc(DType::bf16, {M, m.I}), up = big.alloc(DType::bf16, {M, m.I});
      fill_random(*device_, in, 4);
      const size_t set = size_t(2 * m.I * m.K) * 2;
      const size_t stride = (set + 4095) / 4096 * 4096 + 4096 * 7;
      const int calls = set > 64e6 ? 10 : 40;
      auto weights = [&](int call, int which) {
        size_t at = (size_t(call) * stride) % (pool.nbytes() - stride + 1);
        at -= at % 256;
        return Tensor(static_cast<char*>(pool.data) + at + size_t(which) * (set / 2), DType::bf16, {m.I, m.K},
                      Device::cuda);
      };
      auto time_us = [&](auto&& one) {
        return graph_us_per_call(ctx, calls, [&](int i) { one(weights(i, 0), weights(i, 1)); });
      };
      const double unfused = time_us([&](Tensor wg, Tensor wu) {
        const ops::LinearSegment segs[] = {{gate, wg, Tensor{}}, {up, wu, Tensor{}}};
        ops::linear_forward_multi(ctx, in, segs);
        ops::swiglu_forward(ctx, h, gate, up);
      });
      const cd::SwigluPlan plan = cd::linear_swiglu_plan(M, m.K, m.I);
      const double fused = time_us([&](Tensor wg, Tensor wu) { cd::linear_swiglu_fused(ctx, h, in, wg, wu, &plan); });
      std::printf("{\"op\":\"linear_swiglu\",\"model\":\"%s\",\"M\":%lld,\"weight_mb\":%.2f,\"unfused_us\":%.2f,"
                  "\"fused_us\":%.2f,\"plan\":\"%dx%d%s\",\"fused_gbps\":%.0f,\"widths_us\":{",
                  m.name, (long long)M, double(set) / 1e6, unfused, fused, plan.cols, plan.rows,
                  plan.deep ? " deep" : "", double(set) / (fused * 1e3));
      // Every width at this row count (with the plan's ring), for the plan's rule.
      bool first = true;
      for (const int cols : cd::linear_swiglu_widths()) {
        const cd::SwigluPlan p{cols, plan.rows, plan.deep};
        const double us = time_us([&](Tensor wg, Tensor wu) { cd::linear_swiglu_fused(ctx, h, in, wg, wu, &p); });
        std::printf("%s\"%d\":%.2f", first ? "" : ",", cols, us);
        first = false;
      }
      // And every width with the other ring.
      std::printf("},\"other_ring_us\":{");
      first = true;
      for (const int cols : cd::linear_swiglu_widths()) {
        const cd::SwigluPlan p{cols, plan.rows, !plan.deep};
        const double us = time_us([&](Tensor wg, Tensor wu) { cd::linear_swiglu_fused(ctx, h, in, wg, wu, &p); });
        std::printf("%s\"%d\":%.2f", first ? "" : ",", cols, us);
        first = false;
      }
      std::printf("}}\n");
      std::fflush(stdout);
    }
}

// Speed at prefill rows: the wide kernel against
// cuBLASLt's gate/up product (as linear_forward_multi routes it) then
// swiglu_forward, in CUDA graphs of back-to-back calls on one weight pair
// (a prefill layer's: in L2 after the first call), as TFLOP/s of the
// products.
TEST_F(LinearSwigluGpu, PrefillPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  if (!cd::linear_swiglu_wide_preferred(4096, 896, 4864)) GTEST_SKIP() << "no sm_90a build";
  std::printf("{\"device\":\"%s\"}\n", device_->name().c_str());
  Arena big(size_t(6) << 30, Device::cuda, "linear-swiglu-prefill-perf");
  struct Model {
    const char* name;
    int64_t K, I;
  };
  const Model models[] = {{"qwen2.5-0.5b", 896, 4864}, {"qwen2.5-1.5b", 1536, 8960}, {"qwen2.5-7b", 3584, 18944}};
  const ops::Ctx ctx = gpu();
  for (const Model& m : models)
    for (const int64_t M : {int64_t(512), int64_t(1024), int64_t(4096), int64_t(32768)}) {
      if (M * m.I > (int64_t(160) << 20)) continue;  // gate, up and h within the arena
      ArenaScope scope(big);
      Tensor in = big.alloc(DType::bf16, {M, m.K}), h = big.alloc(DType::bf16, {M, m.I});
      Tensor gate = big.alloc(DType::bf16, {M, m.I}), up = big.alloc(DType::bf16, {M, m.I});
      Tensor wg = big.alloc(DType::bf16, {m.I, m.K}), wu = big.alloc(DType::bf16, {m.I, m.K});
      fill_random(*device_, in, 4);
      fill_random(*device_, wg, 5, -0.05f, 0.05f);
      fill_random(*device_, wu, 6, -0.05f, 0.05f);
      const int calls = M >= 32768 ? 3 : 10;
      auto time_us = [&](auto&& one) { return graph_us_per_call(ctx, calls, [&](int) { one(); }); };
      const double unfused = time_us([&] {
        const ops::LinearSegment segs[] = {{gate, wg, Tensor{}}, {up, wu, Tensor{}}};
        ops::linear_forward_multi(ctx, in, segs);
        ops::swiglu_forward(ctx, h, gate, up);
      });
      const double product = time_us([&] {
        const ops::LinearSegment segs[] = {{gate, wg, Tensor{}}, {up, wu, Tensor{}}};
        ops::linear_forward_multi(ctx, in, segs);
      });
      const double wide = time_us([&] { cd::linear_swiglu_wide(ctx, h, in, wg, wu); });
      const double flop = 2.0 * double(M) * double(2 * m.I) * double(m.K);
      std::printf("{\"op\":\"linear_swiglu_wide\",\"model\":\"%s\",\"M\":%lld,\"unfused_us\":%.1f,"
                  "\"product_alone_us\":%.1f,\"wide_us\":%.1f,\"product_tflops\":%.0f,\"wide_tflops\":%.0f,"
                  "\"preferred\":%s}\n",
                  m.name, (long long)M, unfused, product, wide, flop / (product * 1e6), flop / (wide * 1e6), cd::linear_swiglu_wide_preferred(M, m.K, m.I) ? "true" : "false");
      std::fflush(stdout);
    }
}

}  // namespace
}  // namespace dapo::test
