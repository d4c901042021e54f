// CPU reference of the vocab-parallel token embedding: OpenMP over tokens
// for the lookup, over column chunks for the scatter-add (each task owns
// whole columns of dweight, so repeated ids never race).
#include "dapo/ops/embedding.h"
#include "cpu_check.h"
#include "src/ops/cpu/cpu_ops.h"

#include <algorithm>
#include <cstring>

namespace dapo::ops::cpu {
namespace {

// Columns per scatter-add task; 32 floats = two cache lines, so tasks of
// different threads rarely share a line.
constexpr int64_t kColumnChunk = 32;

using detail::check_tensor;

// A negative id would index before the table; catch it before any thread
// reads memory with it (the CPU reads the ids on the host; CUDA flags them).
void check_ids(const Tensor& ids) {
  const int32_t* id = ids.ptr<int32_t>();
  const int64_t n = ids.numel();
  int32_t lowest = 0;
  int64_t where = -1;
  for (int64_t i = 0; i < n; ++i)
    if (id[i] < lowest) lowest = id[i], where = i;
  DAPO_CHECK(where < 0, "token id ", lowest, " at position ", where, " is negative");
}

}  // namespace

// The contract (dtypes, shapes, aliasing, vocab_start) is checked by
// ops::embedding_forward; the reference computes in f32.
void embedding_forward(const Ctx&, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start) {
  check_tensor(weight, DType::f32, "weight");
  const int64_t N = ids.shape[0], V = weight.shape[0], C = weight.shape[1];
  check_ids(ids);
  float* o = out.ptr<float>();
  const int32_t* id = ids.ptr<int32_t>();
  const float* w = weight.ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = int64_t(id[i]) - vocab_start;
    if (row >= 0 && row < V) std::memcpy(o + i * C, w + row * C, size_t(C) * sizeof(float));
    else std::memset(o + i * C, 0, size_t(C) * sizeof(float));
  }
}

void embedding_backward(const Ctx&, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start) {
  check_tensor(dout, DType::f32, "dout");
  const int64_t N = ids.shape[0], V = dweight.shape[0], C = dweight.shape[1];
  check_ids(ids);
  float* dw = dweight.ptr<float>();
  const float* g = dout.ptr<float>();
  const int32_t* id = ids.ptr<int32_t>();
  const int64_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kColumnChunk;
    const int64_t len = std::min(kColumnChunk, C - c0);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t row = int64_t(id[i]) - vocab_start;
      if (row < 0 || row >= V) continue;
      float* dst = dw + row * C + c0;
      const float* src = g + i * C + c0;
      for (int64_t j = 0; j < len; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace dapo::ops::cpu
