// The optimizer-side ops on the GPU against the CPU ops: AdamW (with and
// without the bf16 copy, odd sizes, unaligned buffers, several steps),
// sum_squares (bit-reproducible, close to a double sum, independent of the
// alignment), cast (the CPU's bits for every special value) and fill; and
// the perf case (DAPO_GPU_PERF=1) over 1.5e9 elements.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "dapo/ops/adamw.h"
#include "dapo/ops/cast.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/sum_squares.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Distance in units in the last place between two finite floats of one sign
// (or both zero); large for anything else.
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (!std::isfinite(a) || !std::isfinite(b) || (a < 0) != (b < 0)) return std::numeric_limits<int64_t>::max();
  return std::llabs(int64_t(bits_of(a)) - int64_t(bits_of(b)));
}

class OptimOpsGpu : public GpuTest {
 protected:
  // A device view of `n` elements starting `offset` elements into a guarded
  // buffer (offset 1: a buffer that is not 16-byte aligned).
  Tensor guarded_view(DType dtype, int64_t n, int64_t offset) {
    Tensor g = guarded(dtype, {n + offset});
    return Tensor(static_cast<char*>(g.data) + offset * int64_t(dtype_size(dtype)), dtype, {n}, Device::cuda);
  }
  void put(Tensor dst, const std::vector<float>& host) {
    device_->copy_to_device(dst, Tensor(const_cast<float*>(host.data()), DType::f32, {dst.numel()}));
  }
  // Raw bits of a device tensor of 2-byte elements.
  std::vector<uint16_t> download_bits16(const Tensor& t) {
    std::vector<uint16_t> out(size_t(t.numel()));
    Tensor h(out.data(), t.dtype, {t.numel()});
    device_->copy_to_host(h, Tensor(t.data, t.dtype, {t.numel()}, Device::cuda));
    return out;
  }
  std::vector<float> download_flat(const Tensor& t) { return download(Tensor(t.data, t.dtype, {t.numel()}, Device::cuda)); }
};

// ---- AdamW ----

TEST_F(OptimOpsGpu, AdamWMatchesCpuOverStepsWithTheBf16Copy) {
  for (const int64_t N : {int64_t(1000003), int64_t(4096), int64_t(7), int64_t(0)})
    for (const int64_t offset : {int64_t(0), int64_t(1)}) {
      SCOPED_TRACE(::testing::Message() << "N=" << N << " offset=" << offset);
      const size_t mark = arena_->mark();
      auto w = random_bf16_exact(size_t(N), 1, -1, 1);
      std::vector<float> m(size_t(N), 0.0f), v(size_t(N), 0.0f);
      std::vector<bf16> copy(static_cast<size_t>(N));
      Tensor dw = guarded_view(DType::f32, N, offset), dm = guarded_view(DType::f32, N, offset);
      Tensor dv = guarded_view(DType::f32, N, offset), dg = guarded_view(DType::f32, N, offset);
      Tensor db = guarded_view(DType::bf16, N, offset);
      put(dw, w);
      put(dm, m);
      put(dv, v);
      ops::AdamWParams p;
      p.lr = 1e-3f;
      p.weight_decay = 0.1f;
      p.beta2 = 0.95f;
      p.grad_scale = 0.37f;
      int64_t worst = 0, exact = 0;
      for (int step = 1; step <= 3; ++step) {
        p.step = step;
        auto g = random_bf16_exact(size_t(N), 10 + step, -2, 2);
        for (int64_t i = 0; i < N; i += 7) g[i] *= 1e-4f;
        put(dg, g);
        ops::adamw_step(cpu(), tensor_f32(w.data(), {N}), tensor_f32(g.data(), {N}), tensor_f32(m.data(), {N}),
                        tensor_f32(v.data(), {N}), tensor_bf16(copy.data(), {N}), p);
        ops::adamw_step(gpu(), dw, dg, dm, dv, db, p);
        const auto gw = download(dw), gm = download(dm), gv = download(dv);
        for (int64_t i = 0; i < N; ++i) {
          const int64_t d = std::max({ulps(gw[i], w[i]), ulps(gm[i], m[i]), ulps(gv[i], v[i])});
          worst = std::max(worst, d);
          exact += d == 0;
          ASSERT_LE(d, 2) << "step " << step << " index " << i << ": gpu " << gw[i] << " " << gm[i] << " " << gv[i]
                          << " cpu " << w[i] << " " << m[i] << " " << v[i];
        }
        // The copy is the rounded GPU param, bit for bit (and the CPU's copy too).
        const auto bits = download_bits16(db);
        for (int64_t i = 0; i < N; ++i) {
          ASSERT_EQ(bits[i], to_bf16(gw[i]).bits) << "step " << step << " index " << i;
          ASSERT_EQ(bits[i], copy[i].bits) << "step " << step << " index " << i;
        }
      }
      std::printf("[adamw] N=%lld offset=%lld: worst %lld ulp, %lld of %lld element-steps exact\n", (long long)N,
                  (long long)offset, (long long)worst, (long long)exact, (long long)(3 * N));
      // Without the copy: the same state.
      Tensor dw2 = guarded_view(DType::f32, N, offset), dm2 = guarded_view(DType::f32, N, offset);
      Tensor dv2 = guarded_view(DType::f32, N, offset);
      const auto w0 = download(dw), m0 = download(dm), v0 = download(dv), g0 = download(dg);
      put(dw2, w0);
      put(dm2, m0);
      put(dv2, v0);
      p.step = 4;
      ops::adamw_step(gpu(), dw, dg, dm, dv, db, p);
      ops::adamw_step(gpu(), dw2, dg, dm2, dv2, Tensor{}, p);
      EXPECT_EQ(std::memcmp(download(dw).data(), download(dw2).data(), size_t(N) * 4), 0);
      EXPECT_EQ(std::memcmp(download(dv).data(), download(dv2).data(), size_t(N) * 4), 0);
      EXPECT_EQ(download(dg), g0) << "grad is read only";
      check_guards();
      guards_.clear();
      arena_->reset(mark);
    }
}

// ---- sum_squares ----

TEST_F(OptimOpsGpu, SumSquaresIsReproducibleAndCloseToADoubleSum) {
  for (const int64_t N : {int64_t(0), int64_t(1), int64_t(3), int64_t(1000), int64_t(65537), int64_t(20000003)}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N);
    const size_t mark = arena_->mark();
    auto x = random_bf16_exact(size_t(N), uint32_t(N % 1000 + 3), -3, 3);
    for (int64_t i = 0; i < N; i += 13) x[i] *= 1e-3f;  // a spread of magnitudes
    double want = 0;
    for (float f : x) want += double(f) * double(f);
    Tensor a = guarded_view(DType::f32, N, 0), b = guarded_view(DType::f32, N, 1);
    put(a, x);
    put(b, x);
    Tensor out = guarded(DType::f32, {1});
    ops::sum_squares(gpu(), out, a);
    const float r1 = download(out)[0];
    ops::sum_squares(gpu(), out, a);
    const float r2 = download(out)[0];
    ops::sum_squares(gpu(), out, b);
    const float r3 = download(out)[0];
    EXPECT_EQ(bits_of(r1), bits_of(r2)) << "not bit-reproducible";
    EXPECT_EQ(bits_of(r1), bits_of(r3)) << "depends on the alignment";
    EXPECT_NEAR(r1, want, 1e-6 * want + 1e-30);
    float cpu_out = -1;
    ops::sum_squares(cpu(), tensor_f32(&cpu_out, {1}), tensor_f32(x.data(), {N}));
    EXPECT_LE(ulps(r1, cpu_out), 1);
    std::printf("[sum_squares] N=%lld: gpu %.9g double %.12g cpu %.9g\n", (long long)N, r1, want, cpu_out);
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
}

// ---- cast ----

std::vector<float> special_floats() {
  const uint32_t bits[] = {0x3f800000u, 0xbf800000u, 0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u,
                           0x3f808001u, 0x3f807fffu, 0xbf818000u, 0x40490fdbu, 0x7f800000u, 0xff800000u,
                           0x7f7f0000u, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x00010000u,
                           0x00008000u, 0x00018000u, 0x007fffffu, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                           0x7fa00000u, 0xff812345u, 0x7fffffffu, 0x00000001u};
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(from_bits(b));
  return v;
}

TEST_F(OptimOpsGpu, CastGivesTheCpuBits) {
  for (const int64_t N : {int64_t(1), int64_t(7), int64_t(8), int64_t(1003), int64_t((1 << 20) + 5)})
    for (const int64_t offset : {int64_t(0), int64_t(1)}) {
      SCOPED_TRACE(::testing::Message() << "N=" << N << " offset=" << offset);
      const size_t mark = arena_->mark();
      std::vector<float> x = GpuTest::random_bf16_exact(size_t(N), 9, -100, 100);
      std::mt19937 gen(static_cast<uint32_t>(N));
      for (auto& f : x) f = from_bits(bits_of(f) ^ (gen() & 0xffffu));  // low bits set: real rounding
      const auto specials = special_floats();
      for (size_t i = 0; i < specials.size() && i < x.size(); ++i) x[i * 7 % x.size()] = specials[i];
      // f32 -> bf16.
      std::vector<bf16> want(static_cast<size_t>(N));
      ops::cast(cpu(), tensor_bf16(want.data(), {N}), tensor_f32(x.data(), {N}));
      Tensor in = guarded_view(DType::f32, N, offset);
      put(in, x);
      Tensor out = guarded_view(DType::bf16, N, offset == 0 ? 1 : 0);  // one of the two unaligned when offset 0
      ops::cast(gpu(), out, in);
      const auto got = download_bits16(out);
      for (int64_t i = 0; i < N; ++i) ASSERT_EQ(got[i], want[i].bits) << "f32 " << std::hex << bits_of(x[i]);
      Tensor out2 = guarded_view(DType::bf16, N, offset);
      ops::cast(gpu(), out2, in);
      EXPECT_EQ(download_bits16(out2), got);
      // bf16 -> f32, exact (NaN payloads too).
      Tensor back = guarded_view(DType::f32, N, offset);
      ops::cast(gpu(), back, out2);
      const auto wide = download(back);
      for (int64_t i = 0; i < N; ++i) ASSERT_EQ(bits_of(wide[i]), uint32_t(want[i].bits) << 16) << i;
      // Same dtype: a copy, and a no-op onto itself.
      Tensor copy = guarded_view(DType::f32, N, offset);
      ops::cast(gpu(), copy, in);
      EXPECT_EQ(std::memcmp(download(copy).data(), x.data(), size_t(N) * 4), 0);
      ops::cast(gpu(), copy, copy);
      std::vector<int64_t> ids(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) ids[i] = (int64_t(1) << 40) + i * 977;
      Tensor i64 = upload_raw(ids, {N});
      Tensor i64_out = guarded(DType::i64, {N});
      ops::cast(gpu(), i64_out, i64);
      std::vector<int64_t> ids_back(static_cast<size_t>(N));
      device_->copy_to_host(tensor_i64(ids_back.data(), {N}), i64_out);
      EXPECT_EQ(ids_back, ids);
      check_guards();
      guards_.clear();
      arena_->reset(mark);
    }
}

// ---- fill ----

TEST_F(OptimOpsGpu, FillMatchesCpuForEveryDtype) {
  struct Value {
    DType dtype;
    double value;
  };
  const Value values[] = {{DType::f32, 0.0},  {DType::f32, 1.5},     {DType::f32, -0.0},        {DType::f32, 0.1},
                          {DType::bf16, 0.0}, {DType::bf16, 0.1},    {DType::bf16, -2.0},       {DType::i32, -1.0},
                          {DType::i32, 7.0},  {DType::i64, 0.0},     {DType::i64, 1099511627779.0}, {DType::i64, -3.0}};
  for (const Value& val : values)
    for (const int64_t N : {int64_t(1), int64_t(3), int64_t(17), int64_t(1000003)})
      for (const int64_t offset : {int64_t(0), int64_t(1), int64_t(3)}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(val.dtype) << " " << val.value << " N=" << N << " offset="
                                          << offset);
        const size_t mark = arena_->mark();
        const size_t es = dtype_size(val.dtype);
        std::vector<unsigned char> want(size_t(N) * es, 0x5a);
        ops::fill(cpu(), Tensor(want.data(), val.dtype, {N}), val.value);
        Tensor t = guarded_view(val.dtype, N, offset);
        ops::fill(gpu(), t, val.value);
        std::vector<unsigned char> got(size_t(N) * es);
        device_->copy_to_host(Tensor(got.data(), val.dtype, {N}), t);
        ASSERT_EQ(got, want);
        check_guards();
        guards_.clear();
        arena_->reset(mark);
      }
}

// ---- perf (DAPO_GPU_PERF=1) ----


TEST_F(OptimOpsGpu, Perf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  // 1.5e9 parameters (Qwen2.5-1.5B on one rank): four f32 buffers back to
  // back (so that a view over more than 2^31 elements exists) and the copy.
  const int64_t N = 1500000000;
  Arena big(size_t(N) * 18 + (size_t(64) << 20), Device::cuda, "optim-perf");
  Tensor all = big.alloc(DType::f32, {4 * N});
  float* base = all.ptr<float>();
  auto part = [&](int k) { return Tensor(base + int64_t(k) * N, DType::f32, {N}, Device::cuda); };
  Tensor w = part(0), g = part(1), m = part(2), v = part(3), wb = big.alloc(DType::bf16, {N});
  const auto stream = static_cast<cudaStream_t>(gpu().stream);
  const std::string shape = "N=1.5e9";
  // Non-zero state (never time zeros); the fills are timed too.
  const double fill_ms = median_ms(stream, [&] { ops::fill(gpu(), g, 0.01); }, 5);
  print_perf("fill_f32", shape, fill_ms, 4.0 * double(N));
  ops::fill(gpu(), w, 0.5);
  ops::fill(gpu(), m, 1e-3);
  ops::fill(gpu(), v, 1e-4);

  // Over w and most of g: 2.5e9 elements, past 2^31.
  const int64_t n_big = 2500000000;
  Tensor span(base, DType::f32, {n_big}, Device::cuda);
  Tensor out = device_empty(DType::f32, {1});
  const double ss_ms = median_ms(stream, [&] { ops::sum_squares(gpu(), out, span); });
  print_perf("sum_squares", "N=2.5e9", ss_ms, 4.0 * double(n_big));
  const double want = double(N) * 0.25 + double(n_big - N) * double(0.01f) * double(0.01f);
  EXPECT_NEAR(download(out)[0], want, 1e-6 * want);

  ops::AdamWParams p;
  p.lr = 1e-6f;
  p.step = 10;
  p.grad_scale = 0.5f;
  const double a1 = median_ms(stream, [&] { ops::adamw_step(gpu(), w, g, m, v, wb, p); });
  print_perf("adamw_step+bf16_copy", shape, a1, 30.0 * double(N));
  const double a0 = median_ms(stream, [&] { ops::adamw_step(gpu(), w, g, m, v, Tensor{}, p); });
  print_perf("adamw_step", shape, a0, 28.0 * double(N));
  const double c1 = median_ms(stream, [&] { ops::cast(gpu(), wb, w); });
  print_perf("cast_f32_to_bf16", shape, c1, 6.0 * double(N));
  const double c2 = median_ms(stream, [&] { ops::cast(gpu(), g, wb); });
  print_perf("cast_bf16_to_f32", shape, c2, 6.0 * double(N));
  const double cp = median_ms(stream, [&] { ops::cast(gpu(), m, v); });
  print_perf("copy_d2d_reference", shape, cp, 8.0 * double(N));
}

}  // namespace
}  // namespace dapo::test
