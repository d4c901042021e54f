// linear_forward_multi on the GPU against the CPU reference: the skinny
// kernel (every tile configuration, split and unsplit) and the op as routed,
// on Qwen2.5-0.5B/1.5B decode shapes and odd ones, every out/bias dtype,
// fused segments against separate calls, bit-identical reruns, a CUDA-graph
// replay, unaligned and unsupported views (the cuBLASLt fallback), guarded
// outputs; the cuBLASLt path's strided batch of equal-shape segments (weights
// placed adjacent, apart, backwards) and its fallbacks; and (DAPO_GPU_PERF=1)
// the decode projections timed against cuBLASLt (gate/up batched and one by
// one), (DAPO_SKINNY_SWEEP=1) every plan of every shape timed.
#include "dapo/ops/linear_multi.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "dapo/ops/cuda_graph.h"
#include "dapo/ops/matmul.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

namespace detail = ops::cuda::detail;
using ops::LinearSegment;

// A layer group: K and the widths of the segments reading one input.
struct Shape {
  const char* model;
  const char* layer;
  int64_t K;
  std::vector<int64_t> N;
  bool bias;
};

const std::vector<Shape>& qwen_shapes() {
  static const std::vector<Shape> shapes = {
      {"qwen2.5-0.5b", "qkv", 896, {896, 128, 128}, true},
      {"qwen2.5-0.5b", "o", 896, {896}, false},
      {"qwen2.5-0.5b", "gate_up", 896, {4864, 4864}, false},
      {"qwen2.5-0.5b", "down", 4864, {896}, false},
      {"qwen2.5-1.5b", "qkv", 1536, {1536, 256, 256}, true},
      {"qwen2.5-1.5b", "o", 1536, {1536}, false},
      {"qwen2.5-1.5b", "gate_up", 1536, {8960, 8960}, false},
      {"qwen2.5-1.5b", "down", 8960, {1536}, false},
  };
  return shapes;
}

// bf16 x bf16 products are exact in fp32; what differs from the CPU is the
// fp32 summation order (growing with K) and a bf16 output's one rounding.
struct Tol {
  double atol, rtol;
};
Tol tolerance(DType out, int64_t K) { return {1e-6 + 4e-7 * double(K), out == DType::bf16 ? 4e-3 : 1e-5}; }

class LinearMultiGpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    big_ = std::make_unique<Arena>(size_t(1536) << 20, Device::cuda, "linear-multi-test");
  }

  // Host inputs and outputs of one call, and its device tensors.
  struct Case {
    int64_t M = 0, K = 0;
    std::vector<int64_t> N;
    std::vector<float> in;
    std::vector<std::vector<float>> w, b, want;
    Tensor gin;
    std::vector<Tensor> gw, gb;
    std::vector<DType> out_dt;
  };

  Tensor to_device(Arena& arena, const std::vector<float>& host, std::initializer_list<int64_t> dims, DType dt) {
    Tensor t = arena.alloc(dt, dims);
    if (host.empty()) return t;
    if (dt == DType::f32) {
      device_->copy_to_device(t, Tensor(const_cast<float*>(host.data()), DType::f32, dims));
    } else {
      std::vector<bf16> v(host.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = to_bf16(host[i]);
      device_->copy_to_device(t, Tensor(v.data(), DType::bf16, dims));
    }
    return t;
  }

  // Random bf16-exact inputs on both sides and the CPU reference. bias_mode:
  // 0 none, 1 bf16, 2 f32 (the CPU sees the same values).
  Case make_case(int64_t M, int64_t K, const std::vector<int64_t>& N, DType out_dt, int bias_mode, uint32_t seed) {
    Case c;
    c.M = M, c.K = K, c.N = N;
    c.in = random_bf16_exact(size_t(M * K), seed);
    c.gin = to_device(*big_, c.in, {M, K}, DType::bf16);
    for (size_t i = 0; i < N.size(); ++i) {
      c.w.push_back(random_bf16_exact(size_t(N[i] * K), seed + 10 + uint32_t(i)));
      c.b.push_back(bias_mode == 0 ? std::vector<float>{} : random_bf16_exact(size_t(N[i]), seed + 20 + uint32_t(i)));
      c.gw.push_back(to_device(*big_, c.w[i], {N[i], K}, DType::bf16));
      c.gb.push_back(bias_mode == 0 ? Tensor{}
                                    : to_device(*big_, c.b[i], {N[i]}, bias_mode == 1 ? DType::bf16 : DType::f32));
      c.out_dt.push_back(out_dt);
    }
    std::vector<LinearSegment> segs;
    c.want.resize(N.size());
    for (size_t i = 0; i < N.size(); ++i) {
      c.want[i].assign(size_t(M * N[i]), 0.0f);
      segs.push_back({tensor_f32(c.want[i].data(), {M, N[i]}), tensor_f32(c.w[i].data(), {N[i], K}),
                      bias_mode == 0 ? Tensor{} : tensor_f32(c.b[i].data(), {N[i]})});
    }
    ops::linear_forward_multi(cpu(), tensor_f32(c.in.data(), {M, K}), segs);
    return c;
  }

  // Fresh guarded (NaN-filled) outputs and the segments over them.
  std::vector<LinearSegment> outputs(const Case& c) {
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < c.N.size(); ++i) segs.push_back({guarded(c.out_dt[i], {c.M, c.N[i]}), c.gw[i], c.gb[i]});
    return segs;
  }

  // may_round_twice: the call may have gone to cuBLASLt, whose Hopper
  // kernels can round the product to bf16 before adding the bias (matmul.h):
  // half an ulp of |product| + |bias| more.
  void expect_matches(const Case& c, const std::vector<LinearSegment>& segs, const char* what,
                      bool may_round_twice = false) {
    for (size_t i = 0; i < segs.size(); ++i) {
      const Tol tol = tolerance(c.out_dt[i], c.K);
      const std::vector<float> got = download(segs[i].out);
      const std::vector<float>& want = c.want[i];
      ASSERT_EQ(got.size(), want.size()) << what;
      const bool twice = may_round_twice && c.out_dt[i] == DType::bf16 && !c.b[i].empty();
      size_t bad = 0;
      for (size_t j = 0; j < got.size() && bad < 10; ++j) {
        double allow = tol.atol + tol.rtol * std::fabs(want[j]);
        if (twice) {
          const double b = c.b[i][j % c.b[i].size()];
          allow += 0x1p-8 * (std::fabs(want[j] - b) + std::fabs(b));
        }
        if (!(std::fabs(got[j] - want[j]) <= allow)) {
          ADD_FAILURE() << what << " segment " << i << " [" << j << "]: gpu " << got[j] << " cpu " << want[j];
          ++bad;
        }
      }
    }
  }

  // The skinny kernel (with `plan`, or its own plan when null) on fresh
  // guarded outputs, against the CPU.
  void check_skinny(const Case& c, const detail::SkinnyPlan* plan = nullptr) {
    auto segs = outputs(c);
    detail::linear_forward_multi_skinny(gpu(), c.gin, segs, plan);
    expect_matches(c, segs, plan != nullptr ? "forced plan" : "skinny");
  }
  // The op as routed (the kernel or cuBLASLt) on fresh guarded outputs.
  void check_routed(const Case& c) {
    auto segs = outputs(c);
    ops::linear_forward_multi(gpu(), c.gin, segs);
    expect_matches(c, segs, "routed", true);
  }
  void check_skinny_and_routed(const Case& c) {
    check_skinny(c);
    check_routed(c);
  }

  // Guards checked and the case's memory released (guarded() memory included).
  void release(size_t arena_mark, size_t big_mark) {
    check_guards();
    guards_.clear();
    arena_->reset(arena_mark);
    big_->reset(big_mark);
  }

  std::unique_ptr<Arena> big_;
};

const int64_t kRows[] = {0, 1, 3, 17, 64, 128, 200, 256};

// The skinny kernel with its own plans, and the op as routed, on every Qwen
// shape and row count; out and bias dtypes rotate over the cases.
TEST_F(LinearMultiGpu, QwenShapesMatchCpu) {
  uint32_t seed = 1000;
  int combo = 0;
  for (const Shape& s : qwen_shapes())
    for (const int64_t M : kRows) {
      const DType out_dt = combo % 2 == 0 ? DType::bf16 : DType::f32;
      const int bias_mode = s.bias ? 1 + (combo / 2) % 2 : (combo / 2) % 3;
      ++combo;
      SCOPED_TRACE(testing::Message() << s.model << " " << s.layer << " M " << M << " out " << dtype_name(out_dt)
                                      << " bias " << bias_mode);
      const size_t am = arena_->mark(), bm = big_->mark();
      const Case c = make_case(M, s.K, s.N, out_dt, bias_mode, seed += 100);
      ASSERT_TRUE(detail::linear_multi_skinny_supported(c.gin, outputs(c)));
      check_skinny_and_routed(c);
      release(am, bm);
      if (HasFailure()) return;
    }
}

// The LM head: f32 logits over 151936 columns.
TEST_F(LinearMultiGpu, LmHeadMatchesCpu) {
  for (const int64_t M : {int64_t(1), int64_t(17), int64_t(200)}) {
    SCOPED_TRACE(testing::Message() << "M " << M);
    const size_t am = arena_->mark(), bm = big_->mark();
    const Case c = make_case(M, 896, {151936}, DType::f32, 0, 77 + uint32_t(M));
    check_skinny_and_routed(c);
    release(am, bm);
    if (HasFailure()) return;
  }
}

// Every tile configuration, unsplit and split (3 and 8 ways), with and
// without L2 lookahead, on tails in every dimension: M not a multiple of any
// tile, N below and above a tile, K not a multiple of 64.
TEST_F(LinearMultiGpu, EveryPlanMatchesCpu) {
  struct Odd {
    int64_t K;
    std::vector<int64_t> N;
  };
  const Odd odds[] = {{904, {200, 8, 72}}, {24, {5}}, {40, {5, 3, 130, 1}}, {1160, {260}}};
  uint32_t seed = 5000;
  for (const Odd& o : odds)
    for (const int64_t M : {int64_t(1), int64_t(17), int64_t(200), int64_t(300)}) {
      const size_t am = arena_->mark(), bm = big_->mark();
      const Case c = make_case(M, o.K, o.N, M == 17 ? DType::f32 : DType::bf16, int(M % 3), seed += 100);
      for (int config = 0; config < detail::skinny_config_count(); ++config)
        for (const int splits : {1, 3, 8}) {
          SCOPED_TRACE(testing::Message() << "K " << o.K << " M " << M << " config " << config << " splits "
                                          << splits);
          const detail::SkinnyPlan plan{config, splits, splits == 3, splits != 8, 2 * ((config + splits) % 3)};
          check_skinny(c, &plan);
          if (HasFailure()) return;
        }
      release(am, bm);
    }
}

// Odd shapes through the op: K % 8 != 0 goes to cuBLASLt; the others to the kernel.
TEST_F(LinearMultiGpu, OddShapesThroughTheOp) {
  struct Odd {
    int64_t K;
    std::vector<int64_t> N;
  };
  const Odd odds[] = {{24, {5}}, {40, {5, 7}}, {20, {9, 3}}, {8, {1}}, {1, {4}}};
  uint32_t seed = 7000;
  for (const Odd& o : odds)
    for (const int64_t M : kRows)
      for (int mode = 0; mode < 2; ++mode) {
        SCOPED_TRACE(testing::Message() << "K " << o.K << " M " << M << " mode " << mode);
        const size_t am = arena_->mark(), bm = big_->mark();
        const Case c = make_case(M, o.K, o.N, mode ? DType::f32 : DType::bf16, mode ? 2 : 1, seed += 100);
        check_routed(c);
        release(am, bm);
        if (HasFailure()) return;
      }
}

// Views off 16-byte alignment: an unaligned input or weight goes to
// cuBLASLt, an unaligned output takes the kernel's element stores.
TEST_F(LinearMultiGpu, UnalignedViewsMatchCpu) {
  const int64_t M = 33, K = 256;
  const std::vector<int64_t> N = {96, 40};
  const Case c = make_case(M, K, N, DType::bf16, 1, 9100);
  auto shifted = [&](const Tensor& t, int64_t elems, std::initializer_list<int64_t> dims) {
    Tensor buf = big_->alloc(t.dtype, {t.numel() + 8});
    Tensor v(static_cast<char*>(buf.data) + elems * int64_t(dtype_size(t.dtype)), t.dtype, dims, Device::cuda);
    EXPECT_EQ(cudaSuccess, cudaMemcpyAsync(v.data, t.data, t.nbytes(), cudaMemcpyDeviceToDevice,
                                           static_cast<cudaStream_t>(gpu().stream)));
    device_->synchronize();
    return v;
  };
  for (int what = 0; what < 3; ++what) {
    SCOPED_TRACE(testing::Message() << "unaligned " << (what == 0 ? "in" : what == 1 ? "weight" : "out"));
    Tensor in = what == 0 ? shifted(c.gin, 1, {M, K}) : c.gin;
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < N.size(); ++i) {
      Tensor out = guarded(DType::bf16, {M * N[i] + 8});
      out = what == 2 ? Tensor(static_cast<char*>(out.data) + 2 * (1 + int64_t(i)), DType::bf16, {M, N[i]},
                               Device::cuda)
                      : Tensor(out.data, DType::bf16, {M, N[i]}, Device::cuda);
      segs.push_back({out, what == 1 && i == 1 ? shifted(c.gw[i], 3, {N[i], K}) : c.gw[i], c.gb[i]});
    }
    EXPECT_EQ(detail::linear_multi_skinny_supported(in, segs), what == 2);
    ops::linear_forward_multi(gpu(), in, segs);
    expect_matches(c, segs, "out", true);
  }
  check_guards();
}

// A fused call against the same layers one by one (skinny, and cuBLASLt);
// the same bits on a rerun, and from a replayed CUDA graph.
TEST_F(LinearMultiGpu, FusedMatchesSeparateAndIsBitIdentical) {
  uint32_t seed = 11000;
  for (const Shape& s : qwen_shapes())
    for (const int64_t M : {int64_t(3), int64_t(64), int64_t(200)}) {
      SCOPED_TRACE(testing::Message() << s.model << " " << s.layer << " M " << M);
      const size_t am = arena_->mark(), bm = big_->mark();
      const Case c = make_case(M, s.K, s.N, DType::bf16, s.bias ? 1 : 0, seed += 100);
      auto fused = outputs(c), again = outputs(c), single = outputs(c), lt = outputs(c), replay = outputs(c);
      detail::linear_forward_multi_skinny(gpu(), c.gin, fused);
      detail::linear_forward_multi_skinny(gpu(), c.gin, again);
      for (const LinearSegment& seg : single)
        detail::linear_forward_multi_skinny(gpu(), c.gin, std::span<const LinearSegment>(&seg, 1));
      detail::linear_forward_multi_cublaslt(gpu(), c.gin, lt);
      const ops::CapturedGraph graph =
          ops::CapturedGraph::capture(gpu(), [&] { detail::linear_forward_multi_skinny(gpu(), c.gin, replay); });
      graph.launch(gpu());
      graph.launch(gpu());
      device_->synchronize();
      expect_matches(c, fused, "fused");
      expect_matches(c, single, "one by one");
      expect_matches(c, lt, "cublaslt", true);
      for (size_t i = 0; i < fused.size(); ++i) {
        EXPECT_TRUE(bits(fused[i].out) == bits(again[i].out)) << "segment " << i << " differs between two runs";
        EXPECT_TRUE(bits(fused[i].out) == bits(replay[i].out)) << "segment " << i << " differs in a graph replay";
      }
      release(am, bm);
      if (HasFailure()) return;
    }
}

// cuda::linear_forward routes a skinny bf16 product to the kernel (the same
// bits as a one-segment call) and keeps cuBLASLt for many rows.
TEST_F(LinearMultiGpu, LinearForwardRoutes) {
  for (const int64_t M : {int64_t(5), int64_t(128), int64_t(1000)}) {
    SCOPED_TRACE(testing::Message() << "M " << M);
    const size_t am = arena_->mark(), bm = big_->mark();
    const Case c = make_case(M, 896, {896}, DType::bf16, 1, 12000 + uint32_t(M));
    auto direct = outputs(c), routed = outputs(c), lt = outputs(c);
    detail::linear_forward_multi_skinny(gpu(), c.gin, direct);
    ops::linear_forward(gpu(), routed[0].out, c.gin, c.gw[0], c.gb[0]);
    detail::linear_forward_cublaslt(gpu(), lt[0].out, c.gin, c.gw[0], c.gb[0]);
    const bool skinny = detail::linear_multi_skinny_preferred(M, 896, routed);
    EXPECT_TRUE(bits(routed[0].out) == bits(skinny ? direct[0].out : lt[0].out));
    expect_matches(c, direct, "skinny");
    expect_matches(c, routed, "routed", true);
    release(am, bm);
  }
}

// ---- the cuBLASLt path's strided batch -------------------------------------------

// Copies of a case's weights at element offsets `at` of one buffer, and of
// its biases in one more buffer in the same order (bias i at about at[i] / K,
// rounded up to 8 elements).
struct Placed {
  std::vector<Tensor> w, b;
};

class LinearMultiBatchGpu : public LinearMultiGpu {
 protected:
  Placed place(const Case& c, const std::vector<int64_t>& at) {
    Placed p;
    const cudaStream_t stream = static_cast<cudaStream_t>(gpu().stream);
    int64_t w_end = 0, b_end = 0;
    std::vector<int64_t> b_at;
    for (size_t i = 0; i < c.N.size(); ++i) {
      w_end = std::max(w_end, at[i] + c.N[i] * c.K);
      b_at.push_back((at[i] / c.K + 7) / 8 * 8);
      b_end = std::max(b_end, b_at[i] + c.N[i]);
    }
    const Tensor wbuf = big_->alloc(DType::bf16, {w_end});
    const DType bdt = c.gb[0].defined() ? c.gb[0].dtype : DType::f32;
    const Tensor bbuf = big_->alloc(bdt, {b_end});
    for (size_t i = 0; i < c.N.size(); ++i) {
      p.w.push_back(Tensor(static_cast<char*>(wbuf.data) + at[i] * 2, DType::bf16, {c.N[i], c.K}, Device::cuda));
      EXPECT_EQ(cudaSuccess, cudaMemcpyAsync(p.w[i].data, c.gw[i].data, p.w[i].nbytes(), cudaMemcpyDeviceToDevice,
                                             stream));
      if (!c.gb[i].defined()) {
        p.b.emplace_back();
        continue;
      }
      p.b.push_back(
          Tensor(static_cast<char*>(bbuf.data) + b_at[i] * int64_t(dtype_size(bdt)), bdt, {c.N[i]}, Device::cuda));
      EXPECT_EQ(cudaSuccess, cudaMemcpyAsync(p.b[i].data, c.gb[i].data, p.b[i].nbytes(), cudaMemcpyDeviceToDevice,
                                             stream));
    }
    device_->synchronize();
    return p;
  }

  // The cuBLASLt path on fresh guarded outputs over placed weights, the
  // outputs allocated last to first when outs_reversed; `groups` is what
  // linear_forward_multi_cublaslt reports.
  std::vector<LinearSegment> run_cublaslt(const Case& c, const Placed& p, bool outs_reversed, int& groups) {
    const size_t n = c.N.size();
    std::vector<Tensor> outs(n);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = outs_reversed ? n - 1 - k : k;
      outs[i] = guarded(c.out_dt[i], {c.M, c.N[i]});
    }
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < n; ++i) segs.push_back({outs[i], p.w[i], p.b[i]});
    groups = detail::linear_forward_multi_cublaslt(gpu(), c.gin, segs);
    return segs;
  }

  // Two runs: both match the CPU, with the same bits, in `want_groups` groups.
  void check_twice(const Case& c, const Placed& p, bool outs_reversed, int want_groups) {
    int g1 = 0, g2 = 0;
    const auto a = run_cublaslt(c, p, outs_reversed, g1);
    const auto b = run_cublaslt(c, p, outs_reversed, g2);
    device_->synchronize();
    EXPECT_EQ(g1, want_groups) << "cuBLASLt groups (a batch counts once)";
    EXPECT_EQ(g2, g1);
    expect_matches(c, a, "first run", true);
    expect_matches(c, b, "second run", true);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(bits(a[i].out) == bits(b[i].out)) << "segment " << i << " differs between two runs";
  }
};

// Two segments of one shape (0.5B gate/up at 128 rows, and an odd one),
// every out/bias dtype pairing (the bias in the epilogue, or broadcast
// first), the weights adjacent (gate and up in one buffer), 40 MB apart, or
// the second before the first: one batched product, but for weights that go
// backwards while the outputs go forwards (no negative batch strides: one
// product per segment). Weights, biases and outputs all backwards batch again.
TEST_F(LinearMultiBatchGpu, TwoEqualSegmentsMatchCpu) {
  struct Dims {
    int64_t M, K, N;
  };
  struct Dt {
    DType out;
    int bias_mode;  // 0 none, 1 bf16, 2 f32
  };
  const Dims dims[] = {{128, 896, 4864}, {37, 264, 200}};
  const Dt dts[] = {{DType::bf16, 0}, {DType::bf16, 1}, {DType::f32, 2}, {DType::bf16, 2}, {DType::f32, 0},
                    {DType::f32, 1}};
  uint32_t seed = 13000;
  for (const Dims& d : dims)
    for (const Dt& dt : dts) {
      const size_t am = arena_->mark(), bm = big_->mark();
      const Case c = make_case(d.M, d.K, {d.N, d.N}, dt.out, dt.bias_mode, seed += 100);
      const int64_t n = d.N * d.K;
      for (int mode = 0; mode < 4; ++mode) {
        const char* names[] = {"adjacent", "40 MB apart", "second weight first", "everything second first"};
        SCOPED_TRACE(testing::Message() << "M " << d.M << " K " << d.K << " N " << d.N << " out "
                                        << dtype_name(dt.out) << " bias " << dt.bias_mode << " " << names[mode]);
        const std::vector<int64_t> at = mode == 0   ? std::vector<int64_t>{0, n}
                                        : mode == 1 ? std::vector<int64_t>{0, n + (int64_t(20) << 20)}
                                                    : std::vector<int64_t>{n + 64, 0};
        const Placed p = place(c, at);
        check_twice(c, p, mode == 3, mode == 2 ? 2 : 1);
        if (HasFailure()) return;
      }
      release(am, bm);
    }
}

// Three and more segments need one step between every pair; the longest
// run from the first that has it is batched. And the calls that cannot batch.
TEST_F(LinearMultiBatchGpu, RunsAndFallbacks) {
  const int64_t M = 64, K = 256, N = 200, n = N * K;
  uint32_t seed = 14000;
  struct Run {
    const char* name;
    std::vector<int64_t> N;
    std::vector<int64_t> at;  // weight offsets, elements
    int groups;
  };
  const Run runs[] = {
      {"three evenly spaced", {N, N, N}, {0, n, 2 * n}, 1},
      {"four evenly spaced", {N, N, N, N}, {0, n + 64, 2 * n + 128, 3 * n + 192}, 1},
      {"three, the third off the step", {N, N, N}, {0, n, 2 * n + 64}, 2},
      {"three, the first of another shape", {136, N, N}, {0, n, 2 * n}, 2},
      {"unequal shapes", {N, 136}, {0, n}, 2},
      {"second weight 2 bytes off 16-byte alignment", {N, N}, {0, n + 1}, 2},
      {"one segment", {N}, {0}, 1},
  };
  for (const Run& r : runs)
    for (const int bias_mode : {0, 1}) {
      SCOPED_TRACE(testing::Message() << r.name << " bias " << bias_mode);
      const size_t am = arena_->mark(), bm = big_->mark();
      const Case c = make_case(M, K, r.N, DType::bf16, bias_mode, seed += 100);
      check_twice(c, place(c, r.at), false, r.groups);
      release(am, bm);
      if (HasFailure()) return;
    }
  // Outputs of different dtypes, and a bias on one segment only: no batch.
  for (int what = 0; what < 2; ++what) {
    SCOPED_TRACE(what == 0 ? "bf16 and f32 outputs" : "one bias");
    const size_t am = arena_->mark(), bm = big_->mark();
    Case c = make_case(M, K, {N, N}, DType::bf16, 1, seed += 100);
    if (what == 0) c.out_dt[1] = DType::f32;
    Placed p = place(c, {0, n});
    if (what == 1) {
      // Segment 1 without its bias, on both sides.
      p.b[1] = Tensor{};
      c.b[1].clear();
      const LinearSegment seg{tensor_f32(c.want[1].data(), {M, N}), tensor_f32(c.w[1].data(), {N, K}), Tensor{}};
      ops::linear_forward_multi(cpu(), tensor_f32(c.in.data(), {M, K}), std::span<const LinearSegment>(&seg, 1));
    }
    check_twice(c, p, false, 2);
    release(am, bm);
    if (HasFailure()) return;
  }
  // The Qwen q/k/v shapes through the cuBLASLt path: q alone, k and v batched.
  for (const Shape& s : qwen_shapes()) {
    if (std::string(s.layer) != "qkv") continue;
    SCOPED_TRACE(s.model);
    const size_t am = arena_->mark(), bm = big_->mark();
    const Case c = make_case(128, s.K, s.N, DType::bf16, 1, seed += 100);
    check_twice(c, Placed{c.gw, c.gb}, false, 2);
    release(am, bm);
    if (HasFailure()) return;
  }
}

// ---- perf --------------------------------------------------------------------------

// Weights rotate through a pool larger than L2 (50 MB on an H100), as a
// decode step reads each weight once; the input and outputs stay hot, as the
// previous op's output does. 50 calls captured in a graph (the engine replays
// its decode steps as graphs), timed by events around replays.
class LinearMultiGpuPerf : public LinearMultiGpu {
 protected:
  struct Bench {
    Tensor in, pool;
    std::vector<Tensor> out, bias;
    size_t stride = 0;  // bytes between the weight sets of consecutive calls
    int64_t K = 0;
    std::vector<int64_t> N;
  };

  // Random weights for every shape: 2 x the 1.5B LM head (467 MB), far over L2.
  static constexpr int64_t kPoolElems = int64_t(480) << 20;

  Bench make_bench(Arena& arena, const Tensor& pool, int64_t M, const Shape& s, DType out_dt) {
    Bench b;
    b.K = s.K, b.N = s.N;
    size_t bytes = 0;
    for (int64_t n : s.N) bytes += size_t(n * s.K) * 2;
    b.stride = (bytes + 4095) / 4096 * 4096 + 4096 * 7;  // a set's bytes, then an odd skip
    b.pool = pool;
    EXPECT_LE(b.stride, pool.nbytes());
    b.in = arena.alloc(DType::bf16, {std::max<int64_t>(M, 1), s.K});
    fill_random(*device_, b.in, 4);
    for (int64_t n : s.N) {
      b.out.push_back(arena.alloc(out_dt, {std::max<int64_t>(M, 1), n}));
      b.bias.push_back(s.bias ? arena.alloc(DType::bf16, {n}) : Tensor{});
      if (s.bias) fill_random(*device_, b.bias.back(), 5);
    }
    return b;
  }

  std::vector<LinearSegment> segments(const Bench& b, int64_t M, int call) const {
    const size_t pool = b.pool.nbytes();
    size_t at = (size_t(call) * b.stride) % (pool - b.stride + 1);
    at -= at % 256;
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < b.N.size(); ++i) {
      Tensor w(static_cast<char*>(b.pool.data) + at, DType::bf16, {b.N[i], b.K}, Device::cuda);
      at += size_t(b.N[i] * b.K) * 2;
      segs.push_back({Tensor(b.out[i].data, b.out[i].dtype, {M, b.N[i]}, Device::cuda), w, b.bias[i]});
    }
    return segs;
  }

  // Microseconds per call of `one(segments)` over `calls` back-to-back calls
  // in a graph; the best of `reps` replays after one warm-up replay.
  template <class F>
  double time_us(const Bench& b, int64_t M, F&& one, int calls = 50, int reps = 3) {
    const ops::Ctx ctx = gpu();
    const Tensor in(b.in.data, DType::bf16, {M, b.K}, Device::cuda);
    return graph_us_per_call(ctx, calls, [&](int i) { one(ctx, in, segments(b, M, i)); }, reps);
  }

  static double weight_bytes(const Shape& s) {
    double b = 0;
    for (int64_t n : s.N) b += double(n) * double(s.K) * 2.0;
    return b;
  }

  // cuBLASLt's strided batch of gate and up (one launch, timed as us_batched)
  // against one cuBLASLt call per segment: one JSON line.
  void print_batch_vs_per_segment(const Bench& b, int64_t M, const Shape& s, double us_batched, int calls) {
    const double us_one_by_one = time_us(
        b, M,
        [](const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& sg) {
          for (const LinearSegment& seg : sg) detail::linear_forward_cublaslt(ctx, seg.out, in, seg.weight, seg.bias);
        },
        calls);
    const double wb = weight_bytes(s), flop = 2.0 * double(M) * wb / 2.0;
    std::printf("{\"op\":\"linear_multi_cublaslt_batch\",\"model\":\"%s\",\"layer\":\"%s\",\"M\":%lld,"
                "\"weight_mb\":%.2f,\"batched_us\":%.2f,\"per_segment_us\":%.2f,\"batched_gbps\":%.0f,"
                "\"per_segment_gbps\":%.0f,\"batched_tflops\":%.1f,\"per_segment_tflops\":%.1f}\n",
                s.model, s.layer, (long long)M, wb / 1e6, us_batched, us_one_by_one, wb / (us_batched * 1e3),
                wb / (us_one_by_one * 1e3), flop / (us_batched * 1e6), flop / (us_one_by_one * 1e6));
    std::fflush(stdout);
  }

  // The decode projections of one model (a tensor-parallel shard for tp 2):
  // q, k, gate alone (the unfused path cuBLASLt ran), o, down, the LM head
  // (vocab 151936, when it fits the pool), and the fused q/k/v and gate/up.
  struct Model {
    const char* name;
    int64_t C, q, kv, I, o_in, layers;
    bool lm_head;
  };
  static const std::vector<Model>& perf_models() {
    static const std::vector<Model> models = {
        {"qwen2.5-0.5b", 896, 896, 128, 4864, 896, 24, true},
        {"qwen2.5-1.5b", 1536, 1536, 256, 8960, 1536, 28, true},
        {"qwen2.5-7b", 3584, 3584, 512, 18944, 3584, 28, false},
        {"qwen2.5-7b-tp2", 3584, 1792, 256, 9472, 1792, 28, false},
    };
    return models;
  }
  static std::vector<Shape> perf_shapes(bool unfused) {
    std::vector<Shape> v;
    for (const Model& m : perf_models()) {
      if (unfused) {
        v.push_back({m.name, "q", m.C, {m.q}, true});
        v.push_back({m.name, "k", m.C, {m.kv}, true});
        v.push_back({m.name, "gate", m.C, {m.I}, false});
      }
      v.push_back({m.name, "o", m.o_in, {m.C}, false});
      v.push_back({m.name, "down", m.I, {m.C}, false});
      if (m.lm_head) v.push_back({m.name, "lm_head", m.C, {151936}, false});
      v.push_back({m.name, "qkv", m.C, {m.q, m.kv, m.kv}, true});
      v.push_back({m.name, "gate_up", m.C, {m.I, m.I}, false});
    }
    return v;
  }
};

std::string plan_name(const detail::SkinnyPlan& p) {
  return "c" + std::to_string(p.config) + "s" + std::to_string(p.splits) + (p.l2_prefetch ? "p" : "") + "l" +
         std::to_string(p.lookahead);
}

void skinny_call(const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& s) {
  detail::linear_forward_multi_skinny(ctx, in, s);
}
void cublaslt_call(const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& s) {
  detail::linear_forward_multi_cublaslt(ctx, in, s);
}
void routed_call(const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& s) {
  ops::linear_forward_multi(ctx, in, s);
}

TEST_F(LinearMultiGpuPerf, DecodeProjectionsPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  std::printf("{\"device\":\"%s\"}\n", device_->name().c_str());
  Arena arena(size_t(3) << 30, Device::cuda, "linear-multi-perf");
  const Tensor pool = arena.alloc(DType::bf16, {kPoolElems});
  fill_random(*device_, pool, 3);
  for (const int64_t M : {int64_t(1), int64_t(32), int64_t(64), int64_t(128), int64_t(256)}) {
    // One decode step's GEMMs per model: every layer's qkv, o, gate_up,
    // down, then the LM head; unfused q, k, v, gate, up for the old path.
    struct Step {
      double lt = 0, fused = 0, routed = 0, bytes = 0;
    };
    std::vector<Step> step(perf_models().size());
    for (const Shape& s : perf_shapes(true)) {
      ArenaScope scope(arena);
      const bool lm = std::string(s.layer) == "lm_head";
      const Bench b = make_bench(arena, pool, M, s, lm ? DType::f32 : DType::bf16);
      const double wb = weight_bytes(s);
      const int calls = wb > 64e6 ? 10 : 50;
      const double us_skinny = time_us(b, M, skinny_call, calls), us_lt = time_us(b, M, cublaslt_call, calls),
                   us_routed = time_us(b, M, routed_call, calls);
      const auto segs = segments(b, M, 0);
      const detail::SkinnyPlan plan = detail::skinny_plan(M, s.K, segs);
      detail::SkinnyPlan pf_plan = plan;
      pf_plan.pdl = !plan.pdl;
      const double us_pf = time_us(
          b, M,
          [&](const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& sg) {
            detail::linear_forward_multi_skinny(ctx, in, sg, &pf_plan);
          },
          calls);
      const bool prefer = detail::linear_multi_skinny_preferred(M, s.K, segs);
      if (std::string(s.layer) == "gate_up") print_batch_vs_per_segment(b, M, s, us_lt, calls);
      const double target = 1.5 * (wb / 3.0e6 + 2.0);
      std::printf(
          "{\"op\":\"linear_multi\",\"model\":\"%s\",\"layer\":\"%s\",\"M\":%lld,\"K\":%lld,\"segments\":%zu,"
          "\"weight_mb\":%.2f,\"skinny_us\":%.2f,\"skinny_gbps\":%.0f,\"cublaslt_us\":%.2f,\"cublaslt_gbps\":%.0f,"
          "\"routed_us\":%.2f,\"routed_gbps\":%.0f,\"routed\":\"%s\",\"plan\":\"%s\",\"target_us\":%.2f,"
          "\"other_pdl_us\":%.2f}\n",
          s.model, s.layer, (long long)M, (long long)s.K, s.N.size(), wb / 1e6, us_skinny, wb / (us_skinny * 1e3),
          us_lt, wb / (us_lt * 1e3), us_routed, wb / (us_routed * 1e3), prefer ? "skinny" : "cublaslt",
          plan_name(plan).c_str(), target, us_pf);
      std::fflush(stdout);
      size_t mi = 0;
      while (std::string(perf_models()[mi].name) != s.model) ++mi;
      Step& st = step[mi];
      const double layers = double(perf_models()[mi].layers);
      const std::string l = s.layer;
      if (l == "q" || l == "o" || l == "down") st.lt += layers * us_lt;
      if (l == "k") st.lt += 2 * layers * us_lt;
      if (l == "gate") st.lt += 2 * layers * us_lt;
      if (l == "qkv" || l == "o" || l == "gate_up" || l == "down") {
        st.fused += layers * us_skinny;
        st.routed += layers * us_routed;
        st.bytes += layers * wb;
      }
      if (lm) {
        st.lt += us_lt;
        st.fused += us_skinny;
        st.routed += us_routed;
        st.bytes += wb;
      }
    }
    for (size_t m = 0; m < step.size(); ++m)
      std::printf("{\"op\":\"decode_step_gemms\",\"model\":\"%s\",\"M\":%lld,\"weight_mb\":%.0f,"
                  "\"cublaslt_unfused_us\":%.1f,\"skinny_fused_us\":%.1f,\"routed_fused_us\":%.1f,"
                  "\"routed_gbps\":%.0f}\n",
                  perf_models()[m].name, (long long)M, step[m].bytes / 1e6, step[m].lt, step[m].fused,
                  step[m].routed, step[m].bytes / (step[m].routed * 1e3));
    std::fflush(stdout);
  }
  // The strided batch also takes the prefill and training products (many
  // rows, compute-bound): it must not lose to two calls there either.
  for (const int64_t M : {int64_t(4096), int64_t(16384)})
    for (const Shape& s : perf_shapes(false)) {
      if (std::string(s.layer) != "gate_up" || std::string(s.model).rfind("qwen2.5-7b", 0) == 0) continue;
      ArenaScope scope(arena);
      const Bench b = make_bench(arena, pool, M, s, DType::bf16);
      print_batch_vs_per_segment(b, M, s, time_us(b, M, cublaslt_call, 6), 6);
    }
}

// Every plan of every fused or single projection (DAPO_SKINNY_SWEEP=1): the
// data the plan rule and the routing rule are fitted to. One line per plan,
// then per shape a summary: cuBLASLt, the default plan, the best plan found
// (tile and split first, then its L2 options).
TEST_F(LinearMultiGpuPerf, PlanSweepPerf) {
  if (!gpu_perf_enabled() || std::getenv("DAPO_SKINNY_SWEEP") == nullptr) GTEST_SKIP() << "set DAPO_SKINNY_SWEEP=1";
  Arena arena(size_t(3) << 30, Device::cuda, "linear-multi-sweep");
  const Tensor pool = arena.alloc(DType::bf16, {kPoolElems});
  fill_random(*device_, pool, 3);
  // DAPO_SKINNY_SWEEP_M=64,128: those row counts only.
  const char* only_m = std::getenv("DAPO_SKINNY_SWEEP_M");
  auto wanted = [&](int64_t M) {
    if (only_m == nullptr) return true;
    std::stringstream list(only_m);
    for (std::string item; std::getline(list, item, ',');)
      if (std::atoll(item.c_str()) == M) return true;
    return false;
  };
  for (const int64_t M : {int64_t(1), int64_t(32), int64_t(64), int64_t(128), int64_t(256)})
    for (const Shape& s : perf_shapes(false)) {
      if (!wanted(M)) continue;
      ArenaScope scope(arena);
      const bool lm = std::string(s.layer) == "lm_head";
      const Bench b = make_bench(arena, pool, M, s, lm ? DType::f32 : DType::bf16);
      const double wb = weight_bytes(s);
      const int calls = wb > 64e6 ? 6 : 30;
      const int64_t k_blocks = (s.K + 63) / 64;
      auto time_plan = [&](const detail::SkinnyPlan& plan) {
        const double us = time_us(
            b, M,
            [&](const ops::Ctx& ctx, const Tensor& in, const std::vector<LinearSegment>& sg) {
              detail::linear_forward_multi_skinny(ctx, in, sg, &plan);
            },
            calls, 2);
        std::printf("{\"sweep\":1,\"model\":\"%s\",\"layer\":\"%s\",\"M\":%lld,\"plan\":\"%s\",\"us\":%.2f}\n", s.model,
                    s.layer, (long long)M, plan_name(plan).c_str(), us);
        return us;
      };
      const double lt = time_us(b, M, cublaslt_call, calls, 2);
      const detail::SkinnyPlan def = detail::skinny_plan(M, s.K, segments(b, M, 0));
      const double def_us = time_plan(def);
      detail::SkinnyPlan best = def;
      double best_us = def_us;
      for (int config = 0; config < detail::skinny_config_count(); ++config) {
        int bn = 0, bm = 0;
        detail::skinny_config_tile(config, bn, bm);
        if (bm < M && bm < 64) continue;      // tiny tiles re-read the weights
        if (bm >= 2 * M && bm > 8) continue;  // mostly empty tiles
        int64_t last = 0;
        for (const int splits : {1, 2, 3, 4, 6, 8}) {
          if (splits > k_blocks || (lm && splits > 1)) continue;
          const int64_t per = (k_blocks + splits - 1) / splits, actual = (k_blocks + per - 1) / per;
          if (actual == last) continue;
          last = actual;
          const detail::SkinnyPlan plan{config, int(actual), false, true, 4};
          const double us = time_plan(plan);
          if (us < best_us) best = plan, best_us = us;
        }
      }
      const detail::SkinnyPlan grid = best;
      for (const int la : {0, 2, 8})
        for (const bool pf : {false, true}) {
          detail::SkinnyPlan plan = grid;
          plan.lookahead = la, plan.l2_prefetch = pf;
          const double us = time_plan(plan);
          if (us < best_us) best = plan, best_us = us;
        }
      {
        detail::SkinnyPlan plan = grid;
        plan.l2_prefetch = true;
        const double us = time_plan(plan);
        if (us < best_us) best = plan, best_us = us;
      }
      std::printf("{\"sweep_best\":1,\"model\":\"%s\",\"layer\":\"%s\",\"M\":%lld,\"weight_mb\":%.2f,"
                  "\"cublaslt_us\":%.2f,\"default\":\"%s\",\"default_us\":%.2f,\"best\":\"%s\",\"best_us\":%.2f,"
                  "\"best_gbps\":%.0f,\"cublaslt_gbps\":%.0f}\n",
                  s.model, s.layer, (long long)M, wb / 1e6, lt, plan_name(def).c_str(), def_us,
                  plan_name(best).c_str(), best_us, wb / (best_us * 1e3), wb / (lt * 1e3));
      std::fflush(stdout);
    }
}

}  // namespace
}  // namespace dapo::test
