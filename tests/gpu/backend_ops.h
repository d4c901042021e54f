// The op harness of the GPU tests (ggml's test-backend-ops idea): a table of
// cases, each an op (or a tuning path of one) at given shapes and dtypes,
// whose run builds inputs from fixed seeds, runs the CPU reference (fp32)
// and the CUDA backend on the same values, and compares every output
// against a bound written down in the case with its reason.
// test_backend_ops.cpp runs the table as one parameterised test
// (BackendOps.MatchesCpu/<case>); the test_backend_ops_<family>.cpp files
// fill it. backend_ops_coverage.h lists the ops the table must cover (a CPU
// test checks that list against the ops' headers).
//
// What every case gets from the harness, without asking:
//  - guarded() outputs: guard bytes on both sides, the output itself set to
//    0xFF (NaN in f32 and bf16), checked after the run; ACCUMULATED outputs
//    start from random non-zero values inside guards (guarded_from);
//  - every bound the case declares must be used by a comparison (an output
//    named in the table is compared);
//  - the device flags must be clear after the case (clean inputs);
//  - every op the case names ran on the CUDA backend (the op profiler sees
//    its dispatch).
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/core/bf16.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/ops/op_profiler.h"

namespace dapo::test::backend_ops {

// One output's bound and why it is what it is. Comparators read it as
// |gpu - cpu| <= atol + rtol * |cpu| unless their own comment says more.
struct Bound {
  std::string output;
  double atol = 0, rtol = 0;
  std::string why;
};

class Harness;

struct Case {
  std::string name;              // the gtest parameter name: [A-Za-z0-9_]
  std::vector<std::string> ops;  // the public ops:: entry points it runs on both backends
  std::string path;              // the tuning entry point (cuda::detail) it also or instead runs on the GPU, if any
  std::vector<Bound> bounds;
  std::function<void(Harness&)> run;
};
using Cases = std::vector<Case>;

// The families of cases (test_backend_ops_<family>.cpp).
void add_norm_cases(Cases& cases);
void add_elementwise_cases(Cases& cases);
void add_gemm_cases(Cases& cases);
void add_attention_cases(Cases& cases);
void add_sampling_cases(Cases& cases);

// Ops that do not dispatch through DAPO_DISPATCH (the profiler cannot see
// them): their cases are trusted to call them.
inline bool unprofiled_op(const std::string& op) {
  return op == "copy" || op == "stream_synchronize" || op == "step_in" || op == "step_out";
}

// A parameter name from parts: anything outside [A-Za-z0-9_] becomes '_'.
inline std::string case_name(std::initializer_list<std::string> parts) {
  std::string s;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!s.empty()) s += '_';
    s += p;
  }
  for (char& ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) ch = '_';
  return s;
}
inline std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

// Values representable in bf16 (uniform in [lo, hi), then rounded), so that
// bf16 runs see exactly the CPU's inputs.
inline std::vector<float> bf16_exact(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = to_f32(to_bf16(dist(gen)));
  return v;
}
inline float bf16_round(float x) { return to_f32(to_bf16(x)); }
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Units in the last place between two floats of one sign (or both zero);
// the largest int64 for anything else.
inline int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (!std::isfinite(a) || !std::isfinite(b) || (a < 0) != (b < 0)) return std::numeric_limits<int64_t>::max();
  return std::llabs(int64_t(bits_of(a)) - int64_t(bits_of(b)));
}
inline Tensor host(std::vector<float>& v, std::initializer_list<int64_t> d) { return Tensor(v.data(), DType::f32, d); }
template <class T>
Tensor host_t(std::vector<T>& v, std::initializer_list<int64_t> d) {
  return Tensor(v.data(), dtype_of<T>(), d);
}

// The device, arenas and profiler every case of a run shares.
struct Env {
  Env()
      : device(std::make_unique<ops::CudaDevice>(0)),
        arena(std::make_unique<Arena>(size_t(3) << 30, Device::cuda, "backend-ops")),
        scratch(std::make_unique<Arena>(size_t(256) << 20, Device::cuda, "backend-ops-scratch")),
        host_scratch(std::make_unique<Arena>(size_t(256) << 20, Device::cpu, "backend-ops-host-scratch")),
        pinned(std::make_unique<Arena>(size_t(1) << 20, Arena::Pinned{}, "backend-ops-pinned")),
        profiler(std::make_unique<ops::OpProfiler>()) {}
  std::unique_ptr<ops::CudaDevice> device;
  std::unique_ptr<Arena> arena, scratch, host_scratch, pinned;
  std::unique_ptr<ops::OpProfiler> profiler;
};

class Harness {
 public:
  static constexpr size_t kGuardBytes = 4096;
  static constexpr unsigned char kGuardByte = 0xA5;

  Harness(Env& env, const Case& c)
      : env_(env), case_(c), arena_mark_(env.arena->mark()), pinned_mark_(env.pinned->mark()) {
    env_.device->synchronize();
    env_.device->clear_flags();
    env_.profiler->summary();  // forget anything recorded before
  }
  ~Harness() {
    env_.device->synchronize();
    env_.arena->reset(arena_mark_);
    env_.pinned->reset(pinned_mark_);
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  const Case& test_case() const { return case_; }
  // The CUDA ctx (profiled: finish() checks the case's ops ran) and the CPU one.
  ops::Ctx gpu() const {
    ops::Ctx c = env_.device->ctx(env_.scratch.get());
    c.profiler = env_.profiler.get();
    return c;
  }
  ops::Ctx cpu() const {
    ops::Ctx c;
    c.scratch = env_.host_scratch.get();
    return c;
  }
  ops::CudaDevice& device() const { return *env_.device; }
  Arena& arena() const { return *env_.arena; }
  Arena& pinned() const { return *env_.pinned; }
  void synchronize() const { env_.device->synchronize(); }

  // ---- device tensors ----

  // A device copy of host data in `dtype` (bf16: each value rounded).
  Tensor upload(const std::vector<float>& h, std::initializer_list<int64_t> d, DType dtype = DType::f32) {
    Tensor t = env_.arena->alloc(dtype, d);
    put(t, h);
    return t;
  }
  template <class T>
  Tensor upload_raw(const std::vector<T>& h, std::initializer_list<int64_t> d) {
    Tensor t = env_.arena->alloc(dtype_of<T>(), d);
    if (t.numel() > 0) env_.device->copy_to_device(t, Tensor(const_cast<T*>(h.data()), dtype_of<T>(), d));
    return t;
  }
  // Host values into an existing device tensor (bf16 rounded), any shape.
  void put(const Tensor& t, const std::vector<float>& h) {
    EXPECT_EQ(size_t(t.numel()), h.size());
    if (t.numel() == 0) return;
    const Tensor flat(t.data, t.dtype, {t.numel()}, Device::cuda);
    if (t.dtype == DType::f32) {
      env_.device->copy_to_device(flat, Tensor(const_cast<float*>(h.data()), DType::f32, {t.numel()}));
    } else {
      std::vector<bf16> b(h.size());
      for (size_t i = 0; i < h.size(); ++i) b[i] = to_bf16(h[i]);
      env_.device->copy_to_device(flat, Tensor(b.data(), DType::bf16, {t.numel()}));
    }
  }
  template <class T>
  void put_raw(const Tensor& t, const std::vector<T>& h) {
    EXPECT_EQ(size_t(t.numel()), h.size());
    if (t.numel() == 0) return;
    env_.device->copy_to_device(Tensor(t.data, t.dtype, {t.numel()}, Device::cuda),
                                Tensor(const_cast<T*>(h.data()), dtype_of<T>(), {t.numel()}));
  }
  Tensor device_empty(DType dtype, std::initializer_list<int64_t> d) { return env_.arena->alloc(dtype, d); }

  // An output with guard regions: kGuardBytes of a fixed pattern on both
  // sides, its own bytes 0xFF (NaN in f32 and bf16: an element an op must
  // overwrite but leaves alone shows up), `shift` elements of that NaN
  // fill before it (shift > 0: a view off 16-byte alignment). The guards
  // are checked when the case ends.
  Tensor guarded(DType dtype, std::initializer_list<int64_t> d, int64_t shift = 0) {
    Tensor t(nullptr, dtype, d, Device::cuda);
    const size_t n = t.nbytes() + size_t(shift) * dtype_size(dtype);
    char* base = static_cast<char*>(env_.arena->alloc_bytes(n + 2 * kGuardBytes));
    std::vector<unsigned char> h(n + 2 * kGuardBytes, kGuardByte);
    std::memset(h.data() + kGuardBytes, 0xFF, n);
    // Every dtype's size is even: the bytes move as bf16 pairs.
    env_.device->copy_to_device(Tensor(base, DType::bf16, {int64_t(h.size() / 2)}, Device::cuda),
                                Tensor(h.data(), DType::bf16, {int64_t(h.size() / 2)}));
    t.data = base + kGuardBytes + size_t(shift) * dtype_size(dtype);
    guards_.push_back({base, n});
    return t;
  }
  // A guarded tensor holding `h` (an ACCUMULATED output's starting values,
  // or an input updated in place).
  Tensor guarded_from(const std::vector<float>& h, std::initializer_list<int64_t> d, DType dtype = DType::f32,
                      int64_t shift = 0) {
    Tensor t = guarded(dtype, d, shift);
    put(t, h);
    return t;
  }
  // A flat guarded view of n elements `offset` elements into its buffer.
  Tensor guarded_view(DType dtype, int64_t n, int64_t offset) { return guarded(dtype, {n}, offset); }
  // An input `shift` elements past a 256-byte aligned start (not guarded).
  Tensor upload_at(const std::vector<float>& h, std::initializer_list<int64_t> d, DType dtype, int64_t shift) {
    Tensor t(nullptr, dtype, d, Device::cuda);
    char* base = static_cast<char*>(env_.arena->alloc_bytes(t.nbytes() + size_t(shift) * dtype_size(dtype)));
    t.data = base + size_t(shift) * dtype_size(dtype);
    put(t, h);
    return t;
  }

  // Host f32 copy of a device tensor (bf16 widened exactly).
  std::vector<float> download(const Tensor& t) {
    std::vector<float> out(size_t(t.numel()));
    if (out.empty()) return out;
    const Tensor flat(t.data, t.dtype, {t.numel()}, Device::cuda);
    if (t.dtype == DType::f32) {
      env_.device->copy_to_host(Tensor(out.data(), DType::f32, {t.numel()}), flat);
    } else {
      EXPECT_EQ(t.dtype, DType::bf16);
      std::vector<bf16> b(out.size());
      env_.device->copy_to_host(Tensor(b.data(), DType::bf16, {t.numel()}), flat);
      for (size_t i = 0; i < b.size(); ++i) out[i] = to_f32(b[i]);
    }
    return out;
  }
  template <class T>
  std::vector<T> download_raw(const Tensor& t) {
    std::vector<T> out(size_t(t.numel()));
    if (out.empty()) return out;
    env_.device->copy_to_host(Tensor(out.data(), dtype_of<T>(), {t.numel()}),
                              Tensor(t.data, t.dtype, {t.numel()}, Device::cuda));
    return out;
  }
  std::vector<uint16_t> download_bits16(const Tensor& t) {
    std::vector<uint16_t> out(size_t(t.numel()));
    if (out.empty()) return out;
    env_.device->copy_to_host(Tensor(out.data(), t.dtype, {t.numel()}),
                              Tensor(t.data, t.dtype, {t.numel()}, Device::cuda));
    return out;
  }

  // ---- comparisons: each names an output of the case's bounds ----

  // The bound of `output` (a case that compares an output it did not
  // declare fails).
  const Bound& bound(const std::string& output) {
    used_.insert(output);
    for (const Bound& b : case_.bounds)
      if (b.output == output) return b;
    ADD_FAILURE() << "case " << case_.name << " compares '" << output << "', which its bounds do not name";
    static const Bound none{"", 0, 0, ""};
    return none;
  }
  // |got - want| <= atol + rtol |want| + extra[i] (extra: empty, or one
  // allowance per element, e.g. a second bf16 rounding), elementwise; NaN
  // never passes.
  void close(const std::string& output, const std::vector<float>& got, const std::vector<float>& want,
             const std::vector<float>& extra = {}) {
    const Bound& b = bound(output);
    ASSERT_EQ(got.size(), want.size()) << output;
    ASSERT_TRUE(extra.empty() || extra.size() == want.size()) << output;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double allow = b.atol + b.rtol * std::fabs(double(want[i])) + (extra.empty() ? 0.0 : double(extra[i]));
      if (!(std::fabs(double(got[i]) - double(want[i])) <= allow) && bad++ < 10)
        ADD_FAILURE() << output << "[" << i << "]: gpu " << got[i] << " cpu " << want[i] << " (allowed " << allow
                      << ": " << b.why << ")";
    }
    if (bad > 10) ADD_FAILURE() << output << ": " << bad << " elements out of bounds in all";
  }
  // Errors that scale with the tensor: |got - want| <= atol * max|want| +
  // rtol |want| elementwise, and a relative L2 error at most l2; every
  // element finite.
  void scaled(const std::string& output, const std::vector<float>& got, const std::vector<float>& want, double l2) {
    const Bound& b = bound(output);
    ASSERT_EQ(got.size(), want.size()) << output;
    double maxabs = 0, num = 0, den = 0;
    for (float w : want) maxabs = std::max(maxabs, double(std::fabs(w)));
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = double(got[i]) - double(want[i]);
      num += d * d;
      den += double(want[i]) * want[i];
      if (!(std::fabs(d) <= b.atol * maxabs + b.rtol * std::fabs(want[i])) && bad++ < 8)
        ADD_FAILURE() << output << "[" << i << "]: gpu " << got[i] << " cpu " << want[i] << " (max |cpu| " << maxabs
                      << ": " << b.why << ")";
    }
    if (den > 0) {
      EXPECT_LE(std::sqrt(num / den), l2) << output << ": relative L2 error (" << b.why << ")";
    }
  }
  // The same bits (the output's bound must be 0, 0: exact).
  template <class T>
  void same(const std::string& output, const std::vector<T>& got, const std::vector<T>& want) {
    const Bound& b = bound(output);
    EXPECT_TRUE(b.atol == 0 && b.rtol == 0) << output << ": a bitwise comparison under a non-zero bound";
    ASSERT_EQ(got.size(), want.size()) << output;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ < 10) {
        if constexpr (std::is_floating_point_v<T>)
          ADD_FAILURE() << output << "[" << i << "]: gpu " << got[i] << " cpu " << want[i] << " (" << b.why << ")";
        else
          ADD_FAILURE() << output << "[" << i << "]: gpu " << int64_t(got[i]) << " cpu " << int64_t(want[i]) << " ("
                        << b.why << ")";
      }
    if (bad > 10) ADD_FAILURE() << output << ": " << bad << " elements differ in all";
  }
  // At most atol (of the bound) units in the last place apart.
  void within_ulps(const std::string& output, const std::vector<float>& got, const std::vector<float>& want) {
    const Bound& b = bound(output);
    ASSERT_EQ(got.size(), want.size()) << output;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (!(double(ulps(got[i], want[i])) <= b.atol) && bad++ < 10)
        ADD_FAILURE() << output << "[" << i << "]: gpu " << got[i] << " cpu " << want[i] << ", "
                      << ulps(got[i], want[i]) << " ulp (" << b.why << ")";
  }
  // Every element finite (an output the op must write).
  void finite(const std::string& output, const std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) {
        ADD_FAILURE() << output << "[" << i << "] = " << v[i] << " (not written?)";
        return;
      }
  }

  // Called by the test after run(): guards intact, no device flag, every
  // bound used, every named op dispatched on the GPU.
  void finish() {
    synchronize();
    for (const Guard& g : guards_) {
      std::vector<unsigned char> h(g.bytes + 2 * kGuardBytes);
      env_.device->copy_to_host(Tensor(h.data(), DType::bf16, {int64_t(h.size() / 2)}),
                                Tensor(g.base, DType::bf16, {int64_t(h.size() / 2)}, Device::cuda));
      for (size_t i = 0; i < kGuardBytes; ++i) {
        ASSERT_EQ(h[i], kGuardByte) << "write before an output, " << (kGuardBytes - i) << " bytes ahead";
        ASSERT_EQ(h[kGuardBytes + g.bytes + i], kGuardByte) << "write past an output, at byte " << i;
      }
    }
    const ops::DeviceFlags f = env_.device->read_flags();
    EXPECT_EQ(f.bad_id_count, 0) << "bad id flagged at row " << f.bad_id_row << ", id " << f.bad_id_value;
    EXPECT_EQ(f.non_finite_count, 0) << "non-finite values flagged at row " << f.non_finite_row;
    env_.device->clear_flags();
    for (const Bound& b : case_.bounds) {
      EXPECT_TRUE(used_.count(b.output)) << "output '" << b.output << "' has a bound but was never compared";
    }
    std::set<std::string> ran;
    for (const ops::OpProfiler::Entry& e : env_.profiler->summary()) ran.insert(e.op);
    for (const std::string& op : case_.ops) {
      if (!unprofiled_op(op)) {
        EXPECT_TRUE(ran.count(op)) << "the case names " << op << " but never ran it on the GPU";
      }
    }
  }

 private:
  struct Guard {
    char* base;
    size_t bytes;  // between the two guards
  };
  Env& env_;
  const Case& case_;
  size_t arena_mark_, pinned_mark_;
  std::vector<Guard> guards_;
  std::set<std::string> used_;
};

}  // namespace dapo::test::backend_ops
