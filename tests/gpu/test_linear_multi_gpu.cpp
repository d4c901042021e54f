// linear_forward_multi on the GPU beyond the comparison with the CPU
// (test_backend_ops_gemm.cpp has that for the op, the skinny kernel under
// every plan and the cuBLASLt path): the skinny kernel's bits on a rerun and
// in a replayed CUDA graph; linear_forward's routing (the bits of the path
// it says it takes); which path unaligned views take; and the cuBLASLt
// path's strided batch: how many groups it runs (a batch counts once) for
// weights placed adjacent, apart, backwards, and the calls that cannot
// batch, with the same bits on a rerun.

#include <algorithm>

#include "cuda/cuda_ops.h"
#include "dapo/ops/cuda_graph.h"
#include "dapo/ops/matmul.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

namespace detail = ops::cuda::detail;
using ops::LinearSegment;

class LinearMultiGpu : public GpuTest {
 protected:
  // bf16 input and weights of one call (bias_mode: 0 none, 1 bf16, 2 f32).
  struct Call {
    int64_t M = 0, K = 0;
    std::vector<int64_t> N;
    Tensor in;
    std::vector<Tensor> w, b;
    std::vector<std::vector<float>> hw, hb;
    std::vector<DType> out_dt;
  };
  Call make(int64_t M, int64_t K, const std::vector<int64_t>& N, DType out_dt, int bias_mode, uint32_t seed) {
    Call c;
    c.M = M, c.K = K, c.N = N;
    c.in = upload(random_bf16_exact(size_t(M * K), seed), {M, K}, DType::bf16);
    for (size_t i = 0; i < N.size(); ++i) {
      c.hw.push_back(random_bf16_exact(size_t(N[i] * K), seed + 10 + uint32_t(i)));
      c.hb.push_back(bias_mode == 0 ? std::vector<float>{} : random_bf16_exact(size_t(N[i]), seed + 20 + uint32_t(i)));
      c.w.push_back(upload(c.hw[i], {N[i], K}, DType::bf16));
      c.b.push_back(bias_mode == 0 ? Tensor{} : upload(c.hb[i], {N[i]}, bias_mode == 1 ? DType::bf16 : DType::f32));
      c.out_dt.push_back(out_dt);
    }
    return c;
  }
  std::vector<LinearSegment> outputs(const Call& c) {
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < c.N.size(); ++i) segs.push_back({guarded(c.out_dt[i], {c.M, c.N[i]}), c.w[i], c.b[i]});
    return segs;
  }
  void release(size_t mark) {
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
};

// The skinny kernel's plan is a function of the shape and the GPU: a rerun
// and two replays of a captured graph give the same bits.
TEST_F(LinearMultiGpu, SkinnyRerunsAndGraphReplaysAreBitIdentical) {
  uint32_t seed = 11000;
  for (const shapes::Layer& s : shapes::qwen_layers())
    for (const int64_t M : {int64_t(3), int64_t(64), int64_t(200)}) {
      SCOPED_TRACE(testing::Message() << s.model << " " << s.layer << " M " << M);
      const size_t mark = arena_->mark();
      const Call c = make(M, s.K, s.N, DType::bf16, s.bias ? 1 : 0, seed += 100);
      auto fused = outputs(c), again = outputs(c), replay = outputs(c);
      detail::linear_forward_multi_skinny(gpu(), c.in, fused);
      detail::linear_forward_multi_skinny(gpu(), c.in, again);
      const ops::CapturedGraph graph =
          ops::CapturedGraph::capture(gpu(), [&] { detail::linear_forward_multi_skinny(gpu(), c.in, replay); });
      graph.launch(gpu());
      graph.launch(gpu());
      device_->synchronize();
      for (size_t i = 0; i < fused.size(); ++i) {
        EXPECT_TRUE(bits(fused[i].out) == bits(again[i].out)) << "segment " << i << " differs between two runs";
        EXPECT_TRUE(bits(fused[i].out) == bits(replay[i].out)) << "segment " << i << " differs in a graph replay";
      }
      release(mark);
      if (HasFailure()) return;
    }
}

// cuda::linear_forward routes a skinny bf16 product to the kernel (the bits
// of a one-segment call) and keeps cuBLASLt for many rows.
TEST_F(LinearMultiGpu, LinearForwardTakesThePathItPrefers) {
  for (const int64_t M : {int64_t(5), int64_t(128), int64_t(1000)}) {
    SCOPED_TRACE(testing::Message() << "M " << M);
    const size_t mark = arena_->mark();
    const Call c = make(M, 896, {896}, DType::bf16, 1, 12000 + uint32_t(M));
    auto direct = outputs(c), routed = outputs(c), lt = outputs(c);
    detail::linear_forward_multi_skinny(gpu(), c.in, direct);
    ops::linear_forward(gpu(), routed[0].out, c.in, c.w[0], c.b[0]);
    detail::linear_forward_cublaslt(gpu(), lt[0].out, c.in, c.w[0], c.b[0]);
    const bool skinny = detail::linear_multi_skinny_preferred(M, 896, routed);
    EXPECT_TRUE(bits(routed[0].out) == bits(skinny ? direct[0].out : lt[0].out)) << (skinny ? "skinny" : "cuBLASLt");
    release(mark);
  }
}

// An input or a weight off 16-byte alignment is not the kernel's (cuBLASLt
// takes it); an unaligned output is (element stores).
TEST_F(LinearMultiGpu, UnalignedViewsTakeTheirPath) {
  const int64_t M = 33, K = 256;
  const std::vector<int64_t> N = {96, 40};
  const Call c = make(M, K, N, DType::bf16, 1, 9100);
  auto shifted = [&](const Tensor& t, int64_t elems, std::initializer_list<int64_t> dims) {
    Tensor buf = device_empty(t.dtype, {t.numel() + 8});
    return Tensor(static_cast<char*>(buf.data) + elems * int64_t(dtype_size(t.dtype)), t.dtype, dims, Device::cuda);
  };
  for (int what = 0; what < 3; ++what) {
    SCOPED_TRACE(testing::Message() << "unaligned " << (what == 0 ? "in" : what == 1 ? "weight" : "out"));
    const Tensor in = what == 0 ? shifted(c.in, 1, {M, K}) : c.in;
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < N.size(); ++i) {
      Tensor out = device_empty(DType::bf16, {M * N[i] + 8});
      out = Tensor(static_cast<char*>(out.data) + (what == 2 ? 2 * (1 + int64_t(i)) : 0), DType::bf16, {M, N[i]},
                   Device::cuda);
      segs.push_back({out, what == 1 && i == 1 ? shifted(c.w[i], 3, {N[i], K}) : c.w[i], c.b[i]});
    }
    EXPECT_EQ(detail::linear_multi_skinny_supported(in, segs), what == 2);
  }
}

// ---- the cuBLASLt path's strided batch ----

class LinearMultiBatchGpu : public LinearMultiGpu {
 protected:
  // The call's weights and biases copied to element offsets `at` of one
  // buffer (bias i at about at[i] / K, rounded up to 8 elements).
  struct Placed {
    std::vector<Tensor> w, b;
  };
  Placed place(const Call& c, const std::vector<int64_t>& at) {
    Placed p;
    int64_t w_end = 0, b_end = 0;
    std::vector<int64_t> b_at;
    for (size_t i = 0; i < c.N.size(); ++i) {
      w_end = std::max(w_end, at[i] + c.N[i] * c.K);
      b_at.push_back((at[i] / c.K + 7) / 8 * 8);
      b_end = std::max(b_end, b_at[i] + c.N[i]);
    }
    const Tensor wbuf = device_empty(DType::bf16, {w_end});
    const DType bdt = c.b[0].defined() ? c.b[0].dtype : DType::f32;
    const Tensor bbuf = device_empty(bdt, {b_end});
    for (size_t i = 0; i < c.N.size(); ++i) {
      p.w.push_back(Tensor(static_cast<char*>(wbuf.data) + at[i] * 2, DType::bf16, {c.N[i], c.K}, Device::cuda));
      put(p.w[i], c.hw[i]);
      if (!c.b[i].defined()) {
        p.b.emplace_back();
        continue;
      }
      p.b.push_back(Tensor(static_cast<char*>(bbuf.data) + b_at[i] * int64_t(dtype_size(bdt)), bdt, {c.N[i]},
                           Device::cuda));
      put(p.b[i], c.hb[i]);
    }
    return p;
  }
  void put(const Tensor& t, const std::vector<float>& h) {
    if (t.dtype == DType::f32) {
      device_->copy_to_device(t, Tensor(const_cast<float*>(h.data()), DType::f32, {t.numel()}));
    } else {
      std::vector<bf16> v(h.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = to_bf16(h[i]);
      device_->copy_to_device(Tensor(t.data, DType::bf16, {t.numel()}, Device::cuda),
                              Tensor(v.data(), DType::bf16, {t.numel()}));
    }
  }
  // The cuBLASLt path twice on fresh outputs (allocated last to first when
  // outs_reversed): `want_groups` groups both times, the same bits.
  void check_twice(const Call& c, const Placed& p, bool outs_reversed, int want_groups) {
    std::vector<std::vector<LinearSegment>> runs;
    std::vector<int> groups;
    for (int run = 0; run < 2; ++run) {
      const size_t n = c.N.size();
      std::vector<Tensor> outs(n);
      for (size_t k = 0; k < n; ++k) {
        const size_t i = outs_reversed ? n - 1 - k : k;
        outs[i] = guarded(c.out_dt[i], {c.M, c.N[i]});
      }
      std::vector<LinearSegment> segs;
      for (size_t i = 0; i < n; ++i) segs.push_back({outs[i], p.w[i], p.b[i]});
      groups.push_back(detail::linear_forward_multi_cublaslt(gpu(), c.in, segs));
      runs.push_back(segs);
    }
    device_->synchronize();
    EXPECT_EQ(groups[0], want_groups) << "cuBLASLt groups (a batch counts once)";
    EXPECT_EQ(groups[1], groups[0]);
    for (size_t i = 0; i < runs[0].size(); ++i)
      EXPECT_TRUE(bits(runs[0][i].out) == bits(runs[1][i].out)) << "segment " << i << " differs between two runs";
  }
};

// Two segments of one shape, every out/bias dtype pairing: one batched
// product for weights adjacent or 40 MB apart, one per segment for weights
// that go backwards while the outputs go forwards (no negative batch
// strides), one batch again when everything goes backwards.
TEST_F(LinearMultiBatchGpu, TwoEqualSegments) {
  struct Dims {
    int64_t M, K, N;
  };
  struct Dt {
    DType out;
    int bias_mode;
  };
  const Dt dts[] = {{DType::bf16, 0}, {DType::bf16, 1}, {DType::f32, 2}, {DType::bf16, 2}, {DType::f32, 0},
                    {DType::f32, 1}};
  uint32_t seed = 13000;
  for (const Dims d : {Dims{128, 896, 4864}, Dims{37, 264, 200}})
    for (const Dt& dt : dts) {
      const size_t mark = arena_->mark();
      const Call c = make(d.M, d.K, {d.N, d.N}, dt.out, dt.bias_mode, seed += 100);
      const int64_t n = d.N * d.K;
      for (int mode = 0; mode < 4; ++mode) {
        const char* names[] = {"adjacent", "40 MB apart", "second weight first", "everything second first"};
        SCOPED_TRACE(testing::Message() << "M " << d.M << " K " << d.K << " N " << d.N << " out "
                                        << dtype_name(dt.out) << " bias " << dt.bias_mode << " " << names[mode]);
        const std::vector<int64_t> at = mode == 0   ? std::vector<int64_t>{0, n}
                                        : mode == 1 ? std::vector<int64_t>{0, n + (int64_t(20) << 20)}
                                                    : std::vector<int64_t>{n + 64, 0};
        check_twice(c, place(c, at), mode == 3, mode == 2 ? 2 : 1);
        if (HasFailure()) return;
      }
      release(mark);
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
      const size_t mark = arena_->mark();
      const Call c = make(M, K, r.N, DType::bf16, bias_mode, seed += 100);
      check_twice(c, place(c, r.at), false, r.groups);
      release(mark);
      if (HasFailure()) return;
    }
  // Outputs of different dtypes, and a bias on one segment only: no batch.
  for (int what = 0; what < 2; ++what) {
    SCOPED_TRACE(what == 0 ? "bf16 and f32 outputs" : "one bias");
    const size_t mark = arena_->mark();
    Call c = make(M, K, {N, N}, DType::bf16, 1, seed += 100);
    if (what == 0) c.out_dt[1] = DType::f32;
    Placed p = place(c, {0, n});
    if (what == 1) p.b[1] = Tensor{};
    check_twice(c, p, false, 2);
    release(mark);
    if (HasFailure()) return;
  }
  // The Qwen q/k/v shapes through the cuBLASLt path: q alone, k and v batched.
  for (const shapes::Layer& s : shapes::qwen_layers()) {
    if (std::string(s.layer) != "qkv") continue;
    SCOPED_TRACE(s.model);
    const size_t mark = arena_->mark();
    const Call c = make(128, s.K, s.N, DType::bf16, 1, seed += 100);
    check_twice(c, Placed{c.w, c.b}, false, 2);
    release(mark);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace dapo::test
