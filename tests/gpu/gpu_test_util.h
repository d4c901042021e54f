// The fixture of the GPU tests: a device, arenas, uploads and downloads,
// guarded outputs. The comparison of every op with the CPU reference is the
// op harness (backend_ops.h, test_backend_ops.cpp); the per-op files test
// with this fixture what is not such a comparison (bits on a rerun, fused
// against unfused, graphs, device flags). Skips when the machine has no GPU
// (CI), so it runs for real only on the GPU machine.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/ops/cuda_device.h"

namespace dapo::test {

// tests/fixtures, or DAPO_FIXTURES_DIR (the GPU machine runs the binary
// away from the source tree it was built in).
inline std::string fixtures_dir() {
  if (const char* d = std::getenv("DAPO_FIXTURES_DIR")) return d;
  return std::string(DAPO_SOURCE_DIR) + "/tests/fixtures";
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no GPU on this machine";
    device_ = std::make_unique<ops::CudaDevice>(0);
    arena_ = std::make_unique<Arena>(size_t(512) << 20, Device::cuda, "gpu-test");
    scratch_ = std::make_unique<Arena>(size_t(256) << 20, Device::cuda, "gpu-test-scratch");
    host_scratch_ = std::make_unique<Arena>(size_t(256) << 20, Device::cpu, "cpu-test-scratch");
  }

  ops::Ctx gpu() const { return device_->ctx(scratch_.get()); }
  ops::Ctx cpu() const {
    ops::Ctx c;
    c.scratch = host_scratch_.get();
    return c;
  }

  // A device copy of host data, in `dtype` (f32 data rounded when bf16).
  Tensor upload(const std::vector<float>& host, std::initializer_list<int64_t> dims, DType dtype = DType::f32) {
    Tensor t = arena_->alloc(dtype, dims);
    if (dtype == DType::f32) {
      device_->copy_to_device(t, Tensor(const_cast<float*>(host.data()), DType::f32, dims));
    } else {
      std::vector<bf16> b(host.size());
      for (size_t i = 0; i < host.size(); ++i) b[i] = to_bf16(host[i]);
      device_->copy_to_device(t, Tensor(b.data(), DType::bf16, dims));
    }
    return t;
  }
  template <class T>
  Tensor upload_raw(const std::vector<T>& host, std::initializer_list<int64_t> dims) {
    Tensor t = arena_->alloc(dtype_of<T>(), dims);
    device_->copy_to_device(t, Tensor(const_cast<T*>(host.data()), dtype_of<T>(), dims));
    return t;
  }
  Tensor device_empty(DType dtype, std::initializer_list<int64_t> dims) { return arena_->alloc(dtype, dims); }

  // An output tensor with guard regions: kGuardBytes of a fixed pattern on
  // both sides, and its own bytes set to 0xFF (NaN in f32 and bf16, so an op
  // that must overwrite but leaves elements alone shows up as NaN).
  // check_guards() fails the test when a kernel wrote into any guard.
  static constexpr size_t kGuardBytes = 4096;
  static constexpr unsigned char kGuardByte = 0xA5;
  Tensor guarded(DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dtype, dims, Device::cuda);
    const size_t n = t.nbytes();
    char* base = static_cast<char*>(arena_->alloc_bytes(n + 2 * kGuardBytes));
    std::vector<unsigned char> host(n + 2 * kGuardBytes, kGuardByte);
    std::memset(host.data() + kGuardBytes, 0xFF, n);
    device_->copy_to_device(Tensor(base, DType::bf16, {int64_t(host.size() / 2)}, Device::cuda),
                            Tensor(host.data(), DType::bf16, {int64_t(host.size() / 2)}));
    t.data = base + kGuardBytes;
    guards_.push_back({base, n});
    return t;
  }
  // The bytes of a device tensor, for the bit-for-bit checks.
  std::vector<unsigned char> bits(const Tensor& t) {
    std::vector<unsigned char> out(t.nbytes());
    if (out.empty()) return out;
    device_->copy_to_host(Tensor(out.data(), DType::bf16, {int64_t(out.size() / 2)}),
                          Tensor(t.data, DType::bf16, {int64_t(out.size() / 2)}, Device::cuda));
    return out;
  }

  void check_guards() {
    device_->synchronize();
    for (const auto& g : guards_) {
      std::vector<unsigned char> host(g.bytes + 2 * kGuardBytes);
      device_->copy_to_host(Tensor(host.data(), DType::bf16, {int64_t(host.size() / 2)}),
                            Tensor(g.base, DType::bf16, {int64_t(host.size() / 2)}, Device::cuda));
      for (size_t i = 0; i < kGuardBytes; ++i) {
        ASSERT_EQ(host[i], kGuardByte) << "write before an output, " << (kGuardBytes - i) << " bytes ahead";
        ASSERT_EQ(host[kGuardBytes + g.bytes + i], kGuardByte) << "write past an output, at byte " << i;
      }
    }
  }

  // Host f32 copy of a device tensor (bf16 widened).
  std::vector<float> download(const Tensor& t) {
    std::vector<float> out(size_t(t.numel()));
    if (t.dtype == DType::f32) {
      Tensor h = t;
      h.device = Device::cpu;
      h.data = out.data();
      device_->copy_to_host(h, t);
    } else {
      std::vector<bf16> b(out.size());
      Tensor h = t;
      h.device = Device::cpu;
      h.data = b.data();
      device_->copy_to_host(h, t);
      for (size_t i = 0; i < b.size(); ++i) out[i] = to_f32(b[i]);
    }
    return out;
  }

  // Values representable in bf16, so that bf16 runs see the same inputs as the CPU.
  static std::vector<float> random_bf16_exact(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = to_f32(to_bf16(dist(gen)));
    return v;
  }

  static void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                           const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t bad = 0;
    for (size_t i = 0; i < got.size() && bad < 10; ++i)
      if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
        ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << " cpu " << want[i];
        ++bad;
      }
  }

  struct Guard {
    char* base;
    size_t bytes;  // the tensor's bytes
  };
  std::vector<Guard> guards_;
  std::unique_ptr<ops::CudaDevice> device_;
  std::unique_ptr<Arena> arena_, scratch_, host_scratch_;
};

}  // namespace dapo::test
