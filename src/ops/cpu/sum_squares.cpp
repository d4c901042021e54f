// CPU reference of the sum of squares: fixed chunks summed in parallel into
// a fixed-size array of double partials, then combined in order.
#include "dapo/ops/sum_squares.h"
#include "src/ops/cpu/cpu_ops.h"

#include <algorithm>

namespace dapo::ops::cpu {
namespace {

// At most kMaxChunks chunks of at least kMinChunk elements. The partials
// live on the stack, so the op needs no scratch memory.
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kMinChunk = 4096;
// Independent accumulators within a chunk: a fixed interleaving (element i
// goes to lane i % kLanes) that the compiler can keep in vector registers
// without reordering anything.
constexpr int kLanes = 8;

double chunk_sum_squares(const float* x, int64_t n) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += double(x[i + l]) * double(x[i + l]);
  for (int l = 0; i < n; ++i, ++l) acc[l] += double(x[i]) * double(x[i]);
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

}  // namespace

// The contract (out (1) f32, x f32) is checked by ops::sum_squares.
void sum_squares(const Ctx&, Tensor out, Tensor x) {
  const int64_t n = x.numel();
  float* o = out.ptr<float>();  // (1)
  if (n == 0) {
    o[0] = 0.0f;
    return;
  }
  const float* xs = x.ptr<float>();  // (N)
  const int64_t chunk = std::max(kMinChunk, (n + kMaxChunks - 1) / kMaxChunks);
  const int64_t nchunks = (n + chunk - 1) / chunk;
  double partial[kMaxChunks];  // (nchunks)
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t begin = c * chunk;
    partial[c] = chunk_sum_squares(xs + begin, std::min(chunk, n - begin));
  }
  double s = 0;
  for (int64_t c = 0; c < nchunks; ++c) s += partial[c];
  o[0] = float(s);
}

}  // namespace dapo::ops::cpu
