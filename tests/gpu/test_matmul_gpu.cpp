// matmul / linear on the GPU (cuBLASLt) against the CPU reference: every
// transpose combination, odd and zero sizes, beta = 0 over NaN, beta != 0
// accumulation (bf16 outputs included), bias epilogue and its fallback,
// misaligned views, accumulated weight/bias gradients, bit-identical reruns,
// and (DAPO_GPU_PERF=1) the GEMMs of Qwen2.5 layers timed.
#include "dapo/ops/matmul.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

struct Dtypes {
  DType ab, cd;  // operands, output
};
std::string dtypes_name(const Dtypes& d) { return std::string(dtype_name(d.ab)) + "_to_" + dtype_name(d.cd); }

// Inputs are bf16-exact, so every product is exact in fp32 on both sides; what
// differs is the fp32 summation order (error growing with K) and, for bf16
// outputs, the final rounding (half an ulp: 2^-8 relative).
struct Tol {
  double atol, rtol;
};
Tol tolerance(DType out, int64_t K) {
  const double atol = 1e-6 + 4e-7 * double(K);
  return {atol, out == DType::bf16 ? 4e-3 : 1e-5};
}

Tensor host(std::vector<float>& v, std::initializer_list<int64_t> d) { return tensor_f32(v.data(), d); }

// A bf16 output that adds something to the product (beta * C, or a bias) may
// be rounded twice: cuBLASLt's non-split-K Hopper kernels round alpha * AB to
// bf16 before the add (measured on an H100 with CUDA 13.0; its split-K
// kernels, reducing in fp32, round once). `addends` holds |alpha * AB| + |the
// added term| per element: half an ulp of each is allowed on top of `tol`.
void expect_close_rounded_twice(const std::vector<float>& got, const std::vector<float>& want,
                                const std::vector<float>& addends, Tol tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(addends.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && bad < 10; ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol.atol + tol.rtol * std::fabs(want[i]) + 0x1p-8 * addends[i])) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << " cpu " << want[i] << " addends " << addends[i];
      ++bad;
    }
}

// |x| + |y| elementwise, for expect_close_rounded_twice.
std::vector<float> abs_sum(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<float> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) s[i] = std::fabs(x[i]) + std::fabs(y[i]);
  return s;
}

class MatmulGpuBase : public GpuTest {
 protected:
  // Writes host values into an existing device tensor (rounded when bf16).
  void fill(const Tensor& t, const std::vector<float>& v) {
    ASSERT_EQ(size_t(t.numel()), v.size());
    if (v.empty()) return;
    if (t.dtype == DType::f32) {
      device_->copy_to_device(Tensor(t.data, DType::f32, {t.numel()}, Device::cuda),
                              Tensor(const_cast<float*>(v.data()), DType::f32, {t.numel()}));
    } else {
      std::vector<bf16> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = to_bf16(v[i]);
      device_->copy_to_device(Tensor(t.data, DType::bf16, {t.numel()}, Device::cuda),
                              Tensor(b.data(), DType::bf16, {t.numel()}));
    }
  }
  Tensor input(const std::vector<float>& v, std::initializer_list<int64_t> dims, DType dt) {
    return v.empty() ? device_empty(dt, dims) : upload(v, dims, dt);
  }
};

// ---- matmul ---------------------------------------------------------------------

class MatmulGpu : public MatmulGpuBase, public ::testing::WithParamInterface<Dtypes> {};

struct Shape {
  int64_t M, N, K;
};

TEST_P(MatmulGpu, AllTransposesAndScalesMatchCpu) {
  const Dtypes dt = GetParam();
  const Shape shapes[] = {{37, 1000, 129}, {64, 128, 256}, {1, 7, 300}, {130, 33, 1}, {16, 24, 8192}};
  struct Scales {
    float alpha, beta;
  };
  const Scales scales[] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, -0.5f}};
  uint32_t seed = 100;
  for (const Shape& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const Scales& sc : scales) {
          SCOPED_TRACE(testing::Message() << "M " << s.M << " N " << s.N << " K " << s.K << " ta " << ta << " tb "
                                          << tb << " alpha " << sc.alpha << " beta " << sc.beta);
          const int64_t M = s.M, N = s.N, K = s.K;
          auto a = random_bf16_exact(M * K, ++seed), b = random_bf16_exact(K * N, ++seed);
          auto c = random_bf16_exact(M * N, ++seed);
          Tensor ga = ta ? input(a, {K, M}, dt.ab) : input(a, {M, K}, dt.ab);
          Tensor gb = tb ? input(b, {N, K}, dt.ab) : input(b, {K, N}, dt.ab);
          Tensor gc = guarded(dt.cd, {M, N});  // NaN: must vanish when beta == 0
          if (sc.beta != 0.0f) fill(gc, c);
          ops::matmul(gpu(), gc, ga, gb, ta, tb, sc.alpha, sc.beta);
          std::vector<float> prod(M * N), beta_c(M * N);
          for (size_t i = 0; i < c.size(); ++i) beta_c[i] = sc.beta * c[i];
          Tensor ha = ta ? host(a, {K, M}) : host(a, {M, K}), hb = tb ? host(b, {N, K}) : host(b, {K, N});
          ops::matmul(cpu(), host(prod, {M, N}), ha, hb, ta, tb, sc.alpha, 0.0f);
          ops::matmul(cpu(), host(c, {M, N}), ha, hb, ta, tb, sc.alpha, sc.beta);
          const Tol tol = tolerance(dt.cd, K);
          if (dt.cd == DType::bf16 && sc.beta != 0.0f)
            expect_close_rounded_twice(download(gc), c, abs_sum(prod, beta_c), tol, "c");
          else
            expect_close(download(gc), c, tol.atol, tol.rtol, "c");
          if (HasFailure()) return;
        }
  check_guards();
}

TEST_P(MatmulGpu, ZeroSizes) {
  const Dtypes dt = GetParam();
  const int64_t M = 5, N = 9;
  // K == 0: C = beta * C, exactly zero for beta == 0 even over NaN.
  for (float beta : {0.0f, 2.0f}) {
    auto c = random_bf16_exact(M * N, 7);
    Tensor gc = guarded(dt.cd, {M, N});
    if (beta != 0.0f) fill(gc, c);
    ops::matmul(gpu(), gc, device_empty(dt.ab, {M, 0}), device_empty(dt.ab, {0, N}), false, false, 1.0f, beta);
    std::vector<float> want(c.size());
    for (size_t i = 0; i < c.size(); ++i) want[i] = beta * c[i];
    expect_close(download(gc), want, 0, 0, "K == 0");
  }
  // M == 0 or N == 0: nothing to write, nothing written (the guards say).
  Tensor c0 = guarded(dt.cd, {0, N}), c1 = guarded(dt.cd, {M, 0});
  ops::matmul(gpu(), c0, device_empty(dt.ab, {0, 4}), device_empty(dt.ab, {4, N}), false, false, 1.0f, 0.0f);
  ops::matmul(gpu(), c1, device_empty(dt.ab, {4, M}), device_empty(dt.ab, {0, 4}), true, true, 1.0f, 1.0f);
  check_guards();
}

// Views that start 2, 4 or 6 bytes past an aligned address (row slices of
// odd-width tensors do): the plan must come from kernels that accept them.
TEST_P(MatmulGpu, MisalignedViewsMatchCpu) {
  const Dtypes dt = GetParam();
  const int64_t M = 45, N = 77, K = 150;
  auto a = random_bf16_exact(M * K, 31), b = random_bf16_exact(K * N, 32), c = random_bf16_exact(M * N, 33);
  auto offset_view = [&](const Tensor& base, int64_t elems, std::initializer_list<int64_t> dims) {
    return Tensor(static_cast<char*>(base.data) + elems * dtype_size(base.dtype), base.dtype, dims, Device::cuda);
  };
  const Tensor abuf = device_empty(dt.ab, {M * K + 8}), bbuf = device_empty(dt.ab, {K * N + 8});
  const Tensor cbuf = guarded(dt.cd, {M * N + 8});
  for (int64_t off : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "offset " << off << " elements");
    Tensor ga = offset_view(abuf, off, {M, K}), gb = offset_view(bbuf, 4 - off, {N, K});
    Tensor gc = offset_view(cbuf, off, {M, N});
    fill(ga, a);
    fill(gb, b);
    fill(gc, c);
    std::vector<float> want = c, prod(M * N);
    ops::matmul(gpu(), gc, ga, gb, false, true, 1.0f, 1.0f);
    ops::matmul(cpu(), host(want, {M, N}), host(a, {M, K}), host(b, {N, K}), false, true, 1.0f, 1.0f);
    ops::matmul(cpu(), host(prod, {M, N}), host(a, {M, K}), host(b, {N, K}), false, true, 1.0f, 0.0f);
    const Tol tol = tolerance(dt.cd, K);
    if (dt.cd == DType::bf16) expect_close_rounded_twice(download(gc), want, abs_sum(prod, c), tol, "c");
    else expect_close(download(gc), want, tol.atol, tol.rtol, "c");
  }
  check_guards();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulGpu,
                         ::testing::Values(Dtypes{DType::bf16, DType::bf16}, Dtypes{DType::bf16, DType::f32},
                                           Dtypes{DType::f32, DType::f32}),
                         [](const auto& info) { return dtypes_name(info.param); });

// ---- linear ----------------------------------------------------------------------

class LinearGpu : public MatmulGpuBase, public ::testing::WithParamInterface<Dtypes> {};

struct LinearCase {
  int64_t N, I, O;
};

TEST_P(LinearGpu, ForwardMatchesCpu) {
  const Dtypes dt = GetParam();
  uint32_t seed = 200;
  for (const LinearCase& lc : {LinearCase{37, 129, 1000}, LinearCase{1, 1536, 256}, LinearCase{300, 64, 1},
                               LinearCase{0, 16, 8}, LinearCase{6, 0, 11}})
    for (int bias_mode = 0; bias_mode < 3; ++bias_mode) {  // none, output's dtype (epilogue), the other dtype
      SCOPED_TRACE(testing::Message() << "N " << lc.N << " I " << lc.I << " O " << lc.O << " bias " << bias_mode);
      const int64_t N = lc.N, I = lc.I, O = lc.O;
      auto in = random_bf16_exact(N * I, ++seed), w = random_bf16_exact(O * I, ++seed);
      auto bias = random_bf16_exact(O, ++seed);
      const DType bias_dt = bias_mode == 1 ? dt.cd : (dt.cd == DType::f32 ? DType::bf16 : DType::f32);
      Tensor gout = guarded(dt.cd, {N, O});
      ops::linear_forward(gpu(), gout, input(in, {N, I}, dt.ab), input(w, {O, I}, dt.ab),
                          bias_mode == 0 ? Tensor{} : input(bias, {O}, bias_dt));
      std::vector<float> want(N * O), prod(N * O), bias_rows(N * O);
      ops::linear_forward(cpu(), host(want, {N, O}), host(in, {N, I}), host(w, {O, I}),
                          bias_mode == 0 ? Tensor{} : host(bias, {O}));
      ops::linear_forward(cpu(), host(prod, {N, O}), host(in, {N, I}), host(w, {O, I}), Tensor{});
      for (size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = bias[i % O];
      const Tol tol = tolerance(dt.cd, I);
      if (dt.cd == DType::bf16 && bias_mode != 0)
        expect_close_rounded_twice(download(gout), want, abs_sum(prod, bias_rows), tol, "out");
      else
        expect_close(download(gout), want, tol.atol, tol.rtol, "out");
      if (HasFailure()) return;
    }
  check_guards();
}

// out = res + in @ weight^T, into a separate out and in place (res == out),
// on prefill-sized and small shapes, an empty product (out = res) included.
TEST_P(LinearGpu, ResidualForwardMatchesCpu) {
  const Dtypes dt = GetParam();
  uint32_t seed = 400;
  for (const LinearCase& lc : {LinearCase{600, 896, 896}, LinearCase{37, 129, 1000}, LinearCase{513, 72, 24},
                               LinearCase{0, 16, 8}, LinearCase{6, 0, 11}})
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << "N " << lc.N << " I " << lc.I << " O " << lc.O << " in place " << in_place);
      const int64_t N = lc.N, I = lc.I, O = lc.O;
      auto in = random_bf16_exact(N * I, ++seed), w = random_bf16_exact(O * I, ++seed);
      auto res = random_bf16_exact(N * O, ++seed);
      Tensor gout = guarded(dt.cd, {N, O});
      Tensor gres = in_place ? gout : input(res, {N, O}, dt.cd);
      if (in_place) fill(gout, res);
      ops::linear_residual_forward(gpu(), gout, input(in, {N, I}, dt.ab), input(w, {O, I}, dt.ab), gres);
      std::vector<float> want(N * O), prod(N * O);
      ops::linear_residual_forward(cpu(), host(want, {N, O}), host(in, {N, I}), host(w, {O, I}), host(res, {N, O}));
      ops::linear_forward(cpu(), host(prod, {N, O}), host(in, {N, I}), host(w, {O, I}), Tensor{});
      const Tol tol = tolerance(dt.cd, I);
      if (dt.cd == DType::bf16)
        expect_close_rounded_twice(download(gout), want, abs_sum(prod, res), tol, "out");
      else
        expect_close(download(gout), want, tol.atol, tol.rtol, "out");
      if (!in_place) EXPECT_EQ(download(gres), res) << "res was written";
      if (HasFailure()) return;
    }
  check_guards();
}

TEST_P(LinearGpu, ResidualForwardRejectsPartialOverlap) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Dtypes dt = GetParam();
  Tensor buf = device_empty(dt.cd, {9, 8});
  Tensor out = buf.slice_rows(0, 8), res = buf.slice_rows(1, 9);
  Tensor in = device_empty(dt.ab, {8, 4}), w = device_empty(dt.ab, {8, 4});
  EXPECT_DEATH(ops::linear_residual_forward(gpu(), out, in, w, res), "res overlaps out without being out");
  // The checks it shares with linear_forward fail in its own name.
  Tensor out2 = device_empty(dt.cd, {8, 8});
  EXPECT_DEATH(ops::linear_residual_forward(gpu(), out2, in, device_empty(dt.ab, {8, 4, 1}), out2),
               "linear_residual_forward: in \\(8, 4\\) and weight");
}

TEST_P(LinearGpu, BackwardOverwritesInputGradAndAccumulatesParamGrads) {
  const Dtypes dt = GetParam();  // cd: din's dtype
  uint32_t seed = 300;
  for (const LinearCase& lc : {LinearCase{37, 129, 1000}, LinearCase{1000, 96, 37}, LinearCase{2048, 256, 70},
                               LinearCase{0, 16, 8}, LinearCase{9, 0, 5}, LinearCase{9, 5, 0}})
    for (bool with_din : {true, false})
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(testing::Message() << "N " << lc.N << " I " << lc.I << " O " << lc.O << " din " << with_din
                                        << " bias " << with_bias);
        const int64_t N = lc.N, I = lc.I, O = lc.O;
        auto in = random_bf16_exact(N * I, ++seed), w = random_bf16_exact(O * I, ++seed);
        auto dout = random_bf16_exact(N * O, ++seed);
        auto dw = random_bf16_exact(O * I, ++seed, -4, 4), db = random_bf16_exact(O, ++seed, -4, 4);  // non-zero
        std::vector<float> din(N * I);
        Tensor gdin = with_din ? guarded(dt.cd, {N, I}) : Tensor{};
        Tensor gdw = guarded(DType::f32, {O, I}), gdb = with_bias ? guarded(DType::f32, {O}) : Tensor{};
        fill(gdw, dw);
        if (with_bias) fill(gdb, db);
        ops::linear_backward(gpu(), gdin, gdw, gdb, input(dout, {N, O}, dt.ab), input(in, {N, I}, dt.ab),
                             input(w, {O, I}, dt.ab));
        ops::linear_backward(cpu(), with_din ? host(din, {N, I}) : Tensor{}, host(dw, {O, I}),
                             with_bias ? host(db, {O}) : Tensor{}, host(dout, {N, O}), host(in, {N, I}),
                             host(w, {O, I}));
        if (with_din) {
          const Tol tol = tolerance(dt.cd, O);
          expect_close(download(gdin), din, tol.atol, tol.rtol, "din");
        }
        const Tol tw = tolerance(DType::f32, N);
        expect_close(download(gdw), dw, tw.atol, tw.rtol, "dweight");
        if (with_bias) expect_close(download(gdb), db, tw.atol, tw.rtol, "dbias");
        if (HasFailure()) return;
      }
  check_guards();
}

// The shape where split-K is likeliest (K = tokens >> M, N): q/k/v's weight
// and bias gradients of a 16k-token micro-batch, run twice from the same
// starting values; also against the CPU. Then the forward twice.
TEST_P(LinearGpu, LargeShapeMatchesCpuAndIsBitIdentical) {
  const Dtypes dt = GetParam();
  const int64_t N = 16384, I = 1536, O = 256;
  auto in = random_bf16_exact(N * I, 401), w = random_bf16_exact(O * I, 402, -0.1f, 0.1f);
  auto dout = random_bf16_exact(N * O, 403), bias = random_bf16_exact(O, 404);
  auto dw = random_bf16_exact(O * I, 405), db = random_bf16_exact(O, 406);
  Tensor gin = input(in, {N, I}, dt.ab), gw = input(w, {O, I}, dt.ab), gdout = input(dout, {N, O}, dt.ab);
  Tensor gbias = input(bias, {O}, dt.cd);
  std::vector<std::vector<unsigned char>> runs[4];
  std::vector<float> got_din, got_dw, got_db, got_out;
  for (int run = 0; run < 2; ++run) {
    Tensor gdin = guarded(dt.cd, {N, I}), gdw = guarded(DType::f32, {O, I}), gdb = guarded(DType::f32, {O});
    Tensor gout = guarded(dt.cd, {N, O});
    fill(gdw, dw);
    fill(gdb, db);
    ops::linear_backward(gpu(), gdin, gdw, gdb, gdout, gin, gw);
    ops::linear_forward(gpu(), gout, gin, gw, gbias);
    runs[0].push_back(bits(gdin));
    runs[1].push_back(bits(gdw));
    runs[2].push_back(bits(gdb));
    runs[3].push_back(bits(gout));
    if (run == 0) {
      got_din = download(gdin);
      got_dw = download(gdw);
      got_db = download(gdb);
      got_out = download(gout);
    }
  }
  const char* names[] = {"din", "dweight", "dbias", "out"};
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(runs[i][0] == runs[i][1]) << names[i] << " differs between two runs";

  std::vector<float> din(N * I), out(N * O), prod(N * O), bias_rows(N * O);
  ops::linear_backward(cpu(), host(din, {N, I}), host(dw, {O, I}), host(db, {O}), host(dout, {N, O}),
                       host(in, {N, I}), host(w, {O, I}));
  ops::linear_forward(cpu(), host(out, {N, O}), host(in, {N, I}), host(w, {O, I}), host(bias, {O}));
  ops::linear_forward(cpu(), host(prod, {N, O}), host(in, {N, I}), host(w, {O, I}), Tensor{});
  for (size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = bias[i % O];
  const Tol td = tolerance(dt.cd, O), tw = tolerance(DType::f32, N), to = tolerance(dt.cd, I);
  expect_close(got_din, din, td.atol, td.rtol, "din");
  expect_close(got_dw, dw, tw.atol, tw.rtol, "dweight");
  expect_close(got_db, db, tw.atol, tw.rtol, "dbias");
  if (dt.cd == DType::bf16) expect_close_rounded_twice(got_out, out, abs_sum(prod, bias_rows), to, "out");
  else expect_close(got_out, out, to.atol, to.rtol, "out");
  check_guards();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearGpu,
                         ::testing::Values(Dtypes{DType::bf16, DType::bf16}, Dtypes{DType::bf16, DType::f32},
                                           Dtypes{DType::f32, DType::f32}),
                         [](const auto& info) { return dtypes_name(info.param); });

// ---- perf -------------------------------------------------------------------------

#define PERF_CUDA(call) ASSERT_EQ(cudaSuccess, (call)) << #call

class MatmulGpuPerf : public MatmulGpuBase {
 protected:
  static constexpr double kPeakTflops = 989.0;  // H100 SXM dense bf16

  // Random values into a device tensor, copied from one host block.
  void randomize(const Tensor& t) {
    const int64_t block = int64_t(1) << 22;
    if (t.dtype == DType::bf16 && host_bf16_.empty()) {
      const auto v = random_bf16_exact(size_t(block), 9001);
      host_bf16_.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) host_bf16_[i] = to_bf16(v[i]);
    }
    if (t.dtype == DType::f32 && host_f32_.empty()) host_f32_ = random_bf16_exact(size_t(block), 9002);
    void* src = t.dtype == DType::bf16 ? static_cast<void*>(host_bf16_.data()) : static_cast<void*>(host_f32_.data());
    const size_t es = dtype_size(t.dtype);
    for (int64_t i = 0; i < t.numel(); i += block) {
      const int64_t n = std::min(block, t.numel() - i);
      device_->copy_to_device(Tensor(static_cast<char*>(t.data) + i * es, t.dtype, {n}, Device::cuda),
                              Tensor(src, t.dtype, {n}));
    }
  }

  // Median of 20 timed runs after 3 warm-ups, in ms.
  template <class F>
  double time_ms(F&& f) {
    const auto stream = static_cast<cudaStream_t>(gpu().stream);
    for (int i = 0; i < 3; ++i) f();
    constexpr int kRuns = 20;
    cudaEvent_t ev[kRuns + 1];
    for (auto& e : ev) EXPECT_EQ(cudaSuccess, cudaEventCreate(&e));
    EXPECT_EQ(cudaSuccess, cudaEventRecord(ev[0], stream));
    for (int i = 0; i < kRuns; ++i) {
      f();
      EXPECT_EQ(cudaSuccess, cudaEventRecord(ev[i + 1], stream));
    }
    EXPECT_EQ(cudaSuccess, cudaEventSynchronize(ev[kRuns]));
    std::vector<float> ms(kRuns);
    for (int i = 0; i < kRuns; ++i) EXPECT_EQ(cudaSuccess, cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    for (auto& e : ev) cudaEventDestroy(e);
    std::sort(ms.begin(), ms.end());
    return 0.5 * (ms[kRuns / 2 - 1] + ms[kRuns / 2]);
  }

  void report(const char* model, const char* layer, const char* op, int64_t M, int64_t N, int64_t K, double ms) {
    const double tflops = 2.0 * double(M) * double(N) * double(K) / (ms * 1e-3) / 1e12;
    std::printf(
        "{\"op\":\"%s\",\"model\":\"%s\",\"layer\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"ms\":%.4f,"
        "\"tflops\":%.1f,\"peak_frac\":%.3f}\n",
        op, model, layer, (long long)M, (long long)N, (long long)K, ms, tflops, tflops / kPeakTflops);
    std::fflush(stdout);
  }

  // Forward, backward-data and backward-weight (f32 accumulate) of one
  // projection: T tokens, I inputs, O outputs, bf16 operands.
  void run_projection(Arena& arena, const char* model, const char* layer, int64_t T, int64_t I, int64_t O,
                      bool bias) {
    ArenaScope scope(arena);
    Tensor in = arena.alloc(DType::bf16, {T, I}), w = arena.alloc(DType::bf16, {O, I});
    Tensor out = arena.alloc(DType::bf16, {T, O}), dout = arena.alloc(DType::bf16, {T, O});
    Tensor din = arena.alloc(DType::bf16, {T, I}), dw = arena.alloc(DType::f32, {O, I});
    Tensor b = arena.alloc(DType::bf16, {O}), db = arena.alloc(DType::f32, {O});
    for (const Tensor* t : {&in, &w, &dout, &dw, &b, &db}) randomize(*t);
    const ops::Ctx ctx = gpu();
    report(model, layer, "fwd", T, O, I, time_ms([&] { ops::linear_forward(ctx, out, in, w, Tensor{}); }));
    if (bias)
      report(model, layer, "fwd_bias", T, O, I, time_ms([&] { ops::linear_forward(ctx, out, in, w, b); }));
    report(model, layer, "bwd_data", T, I, O, time_ms([&] { ops::matmul(ctx, din, dout, w, false, false, 1, 0); }));
    const double wgrad_ms = time_ms([&] { ops::matmul(ctx, dw, dout, in, true, false, 1, 1); });
    report(model, layer, "bwd_weight", O, I, T, wgrad_ms);
    if (bias) {
      // linear_backward always takes dweight: the bias sum's cost is the difference.
      const double ms = time_ms([&] { ops::linear_backward(ctx, Tensor{}, dw, db, dout, in, w); });
      report(model, layer, "bwd_weight_bias", O, I, T, ms);
      std::printf("{\"op\":\"dbias\",\"model\":\"%s\",\"layer\":\"%s\",\"rows\":%lld,\"cols\":%lld,"
                  "\"ms\":%.4f,\"gbps_if_alone\":%.0f}\n",
                  model, layer, (long long)T, (long long)O, ms - wgrad_ms,
                  double(dout.nbytes()) / std::max(1e-6, (ms - wgrad_ms) * 1e-3) / 1e9);
    }
  }

  std::vector<bf16> host_bf16_;
  std::vector<float> host_f32_;
};

TEST_F(MatmulGpuPerf, QwenLayerGemmsPerf) {
  if (std::getenv("DAPO_GPU_PERF") == nullptr) GTEST_SKIP() << "set DAPO_GPU_PERF=1 to time the GEMMs";
  std::printf("{\"device\":\"%s\"}\n", device_->name().c_str());
  Arena arena(size_t(5) << 30, Device::cuda, "matmul-perf");  // lm_head of 1.5B: 3.9 GB
  struct Model {
    const char* name;
    int64_t C, q, kv, I;
  };
  for (const Model& m : {Model{"qwen2.5-1.5b", 1536, 1536, 256, 8960}, Model{"qwen2.5-0.5b", 896, 896, 128, 4864}}) {
    const int64_t T = 16384;
    run_projection(arena, m.name, "q", T, m.C, m.q, true);
    run_projection(arena, m.name, "k", T, m.C, m.kv, true);  // v has k's shape
    run_projection(arena, m.name, "o", T, m.q, m.C, false);
    run_projection(arena, m.name, "gate", T, m.C, m.I, false);  // up has gate's shape
    run_projection(arena, m.name, "down", T, m.I, m.C, false);
    run_projection(arena, m.name, "lm_head", 4096, m.C, 151936, false);
  }
  device_->synchronize();
}

// The generation engine's GEMMs: a decode step multiplies M = (running
// sequences) rows by every weight once, so these are bound by reading the
// weights. Timed back to back (50 calls between two events, as a replayed
// decode graph runs them), reported as the weights' bytes per second.
TEST_F(MatmulGpuPerf, DecodeGemmsPerf) {
  if (std::getenv("DAPO_GPU_PERF") == nullptr) GTEST_SKIP() << "set DAPO_GPU_PERF=1 to time the GEMMs";
  Arena arena(size_t(2) << 30, Device::cuda, "decode-gemm-perf");
  struct Layer {
    const char* model;
    const char* name;
    int64_t K, N;
    bool bias;
  };
  const Layer layers[] = {{"qwen2.5-0.5b", "q", 896, 896, true},     {"qwen2.5-0.5b", "k", 896, 128, true},
                          {"qwen2.5-0.5b", "o", 896, 896, false},    {"qwen2.5-0.5b", "gate", 896, 4864, false},
                          {"qwen2.5-0.5b", "down", 4864, 896, false}, {"qwen2.5-0.5b", "lm_head", 896, 151936, false},
                          {"qwen2.5-1.5b", "q", 1536, 1536, true},   {"qwen2.5-1.5b", "k", 1536, 256, true},
                          {"qwen2.5-1.5b", "gate", 1536, 8960, false}, {"qwen2.5-1.5b", "down", 8960, 1536, false}};
  const auto stream = static_cast<cudaStream_t>(gpu().stream);
  for (const int64_t M : {int64_t(1), int64_t(32), int64_t(128), int64_t(256)})
    for (const Layer& l : layers) {
      ArenaScope scope(arena);
      Tensor in = arena.alloc(DType::bf16, {M, l.K}), w = arena.alloc(DType::bf16, {l.N, l.K});
      Tensor out = arena.alloc(DType::bf16, {M, l.N}), b = arena.alloc(DType::bf16, {l.N});
      for (const Tensor* t : {&in, &w, &b}) randomize(*t);
      const ops::Ctx ctx = gpu();
      const Tensor bias = l.bias ? b : Tensor{};
      for (int i = 0; i < 5; ++i) ops::linear_forward(ctx, out, in, w, bias);
      cudaEvent_t e0, e1;
      ASSERT_EQ(cudaSuccess, cudaEventCreate(&e0));
      ASSERT_EQ(cudaSuccess, cudaEventCreate(&e1));
      constexpr int kCalls = 50;
      ASSERT_EQ(cudaSuccess, cudaEventRecord(e0, stream));
      for (int i = 0; i < kCalls; ++i) ops::linear_forward(ctx, out, in, w, bias);
      ASSERT_EQ(cudaSuccess, cudaEventRecord(e1, stream));
      ASSERT_EQ(cudaSuccess, cudaEventSynchronize(e1));
      float ms = 0;
      ASSERT_EQ(cudaSuccess, cudaEventElapsedTime(&ms, e0, e1));
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      const double us = 1e3 * double(ms) / kCalls;
      std::printf("{\"op\":\"decode_gemm\",\"model\":\"%s\",\"layer\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
                  "\"us\":%.2f,\"weight_gbps\":%.0f}\n",
                  l.model, l.name, (long long)M, (long long)l.N, (long long)l.K, us,
                  double(w.nbytes()) / (us * 1e-6) / 1e9);
      std::fflush(stdout);
    }
}

}  // namespace
}  // namespace dapo::test
