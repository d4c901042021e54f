// Reading the HF reference fixtures (tests/fixtures/model/<name>/*.safetensors)
// in the model tests on the CPU (test_hf_fixture.cpp) and on the GPU
// (tests/gpu/test_model_gpu.cpp), and the size-aware error measure both
// bf16 comparisons use.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dapo/io/safetensors.h"

namespace dapo::test {

inline std::vector<float> read_f32(const io::SafetensorsFile& f, const std::string& name) {
  std::vector<float> v(size_t(f.info(name).numel()));
  f.read_f32(name, v.data());
  return v;
}

// The fixtures store ids as i64 (torch's default); the model takes i32.
inline std::vector<int32_t> read_i32(const io::SafetensorsFile& f, const std::string& name) {
  std::vector<int64_t> v(size_t(f.info(name).numel()));
  f.read_i64(name, v.data());
  return std::vector<int32_t>(v.begin(), v.end());
}

// How far a bf16 result is from an fp32 reference, as a whole: the relative
// error of the vector (||a - b|| / ||b||). Elementwise bounds do not fit bf16
// gradients, whose small elements carry large relative errors.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

}  // namespace dapo::test
