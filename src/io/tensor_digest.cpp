// slab_digest / sum_digests / count_non_finite (tensor_digest.h).
#include "dapo/io/tensor_digest.h"

#include <cmath>
#include <cstring>

#include "dapo/core/error.h"
#include "dapo/core/rng.h"

namespace dapo::io {

uint64_t slab_digest(const std::vector<int64_t>& full_shape, const Hyperslab& slab, const float* data) {
  if (slab.selects_nothing()) return 0;
  DAPO_CHECK(full_shape.size() == 1 || full_shape.size() == 2, "slab_digest: rank ", full_shape.size());
  DAPO_CHECK(slab.start.size() == full_shape.size() && slab.count.size() == full_shape.size(), "slab_digest: slab rank");
  const int64_t rows = slab.count[0], cols = full_shape.size() == 2 ? slab.count[1] : 1;
  const int64_t full_cols = full_shape.size() == 2 ? full_shape[1] : 1;
  const int64_t col0 = full_shape.size() == 2 ? slab.start[1] : 0;
  // Integer sums mod 2^64 are exact in any order, so threads change no bit
  // of the digest; a 1.5B model's training checkpoint is 4.6e9 elements,
  // seconds of single-core work at every save and load.
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (rows * cols > (int64_t(1) << 18))
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t base = uint64_t(slab.start[0] + r) * uint64_t(full_cols) + uint64_t(col0);
    for (int64_t c = 0; c < cols; ++c) {
      uint32_t bits;
      std::memcpy(&bits, data + r * cols + c, sizeof bits);
      sum += mix64((base + uint64_t(c)) ^ mix64(uint64_t(bits) + 0x9E3779B97F4A7C15ull));
    }
  }
  return sum;
}

void sum_digests(const parallel::Comm& comm, std::vector<uint64_t>& parts) {
  // MPI sums signed integers; the 32-bit halves summed separately cannot
  // overflow an int64 below 2^31 ranks, and recombine exactly mod 2^64.
  std::vector<int64_t> halves(parts.size() * 2);
  for (size_t i = 0; i < parts.size(); ++i) {
    halves[2 * i] = int64_t(parts[i] & 0xFFFFFFFFull);
    halves[2 * i + 1] = int64_t(parts[i] >> 32);
  }
  comm.all_reduce_i64(halves, parallel::ReduceOp::sum);
  for (size_t i = 0; i < parts.size(); ++i)
    parts[i] = uint64_t(halves[2 * i]) + (uint64_t(halves[2 * i + 1]) << 32);
}

int64_t count_non_finite(const float* data, int64_t n) {
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n > (int64_t(1) << 18))
  for (int64_t i = 0; i < n; ++i) bad += std::isfinite(data[i]) ? 0 : 1;
  return bad;
}

}  // namespace dapo::io
