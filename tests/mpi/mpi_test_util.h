// Helpers of the MPI tests: typed host buffers addressed as doubles (every
// value used is exact in each dtype), the tp sizes a world size allows, and a
// directory shared by the ranks.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dapo/core/tensor.h"
#include "dapo/parallel/comm.h"

namespace dapo::test {

// n elements of one dtype; get/set convert through double.
struct Buf {
  DType dtype;
  std::vector<std::byte> bytes;

  Buf(DType t, int64_t n) : dtype(t), bytes(size_t(n) * dtype_size(t)) {}
  int64_t size() const { return int64_t(bytes.size() / dtype_size(dtype)); }

  void set(int64_t i, double v) {
    void* p = bytes.data();
    switch (dtype) {
      case DType::f32: static_cast<float*>(p)[i] = float(v); break;
      case DType::bf16: static_cast<bf16*>(p)[i] = to_bf16(float(v)); break;
      case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
      case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    }
  }
  double get(int64_t i) const {
    const void* p = bytes.data();
    switch (dtype) {
      case DType::f32: return static_cast<const float*>(p)[i];
      case DType::bf16: return to_f32(static_cast<const bf16*>(p)[i]);
      case DType::i32: return static_cast<const int32_t*>(p)[i];
      case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
    }
    return 0;
  }
  Tensor view(std::initializer_list<int64_t> dims) {
    Tensor t(bytes.data(), dtype, dims);
    EXPECT_EQ(t.numel(), size()) << "test bug: view " << t.shape_string();
    return t;
  }
};

inline constexpr DType kAllDtypes[] = {DType::f32, DType::bf16, DType::i32, DType::i64};

// An exact value for (rank, index) in dtype t, varying with both and not
// monotone in rank (so max and min pick different ranks per index). Sums of
// up to 4 of them are exact in every dtype, bf16 included (small integers).
inline double value_of(DType t, int rank, int64_t i) {
  const double v = double((rank * 7 + i * 3) % 11) - 5;  // [-5, 5]
  switch (t) {
    case DType::f32: return v * 0.5 + 0.25;
    case DType::bf16: return v;
    case DType::i32: return v * 1000 + rank;
    case DType::i64: return v + double(((rank * 5 + i) % 3 + 1) * (int64_t(1) << 40));
  }
  return 0;
}

// tp sizes to try on a world of n ranks: 1, 2 and n, those that divide n.
inline std::vector<int> tp_choices(int n) {
  std::vector<int> out;
  for (int tp : {1, 2, n})
    if (n % tp == 0 && (out.empty() || out.back() < tp)) out.push_back(tp);
  return out;
}

// A directory every rank sees (same host), made by rank 0 and removed by it
// after all ranks are done with it.
class SharedDir {
 public:
  explicit SharedDir(const parallel::Comm& comm) : comm_(comm) {
    const int64_t pid = comm.all_gather_i64(int64_t(::getpid()))[0];
    path_ = std::filesystem::temp_directory_path() / ("dapo_mpi_io_" + std::to_string(pid));
    if (comm.rank() == 0) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    comm.barrier();
  }
  ~SharedDir() {
    comm_.barrier();
    std::error_code ec;
    if (comm_.rank() == 0) std::filesystem::remove_all(path_, ec);
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  const parallel::Comm& comm_;
  std::filesystem::path path_;
};

}  // namespace dapo::test
