// How CUDA's small-batch products (matmul.h: linear_forward,
// linear_forward_multi and linear_swiglu_forward at 1-8 input rows, the
// tail of a generation round) are spread over CTAs, planned on the host
// from plain values. The kernel file (cuda/gemm/gemv.cu) launches what these
// functions decide; the decisions are tested without a GPU
// (tests/ops/test_gemv_plan.cpp).
//
// At a few rows a product is a matrix-vector product bound by the bytes of
// its weights: each CTA streams kGemvTileRows whole weight rows (and for the
// SwiGLU product as many up rows) once, its threads splitting K in 16-byte
// pieces, and sums in fp32 in one order that depends on K alone. So a row's
// result does not depend on how many other rows share the call (1 to
// kGemvMaxRows): the same bits for a sequence whether it decodes alone or
// with seven others.
#pragma once

#include <cstdint>
#include <span>

namespace dapo::ops::plan {

inline constexpr int64_t kGemvMaxRows = 8;    // input rows (M) one launch takes
inline constexpr int64_t kGemvTileRows = 4;   // weight rows (of each product) per CTA
inline constexpr int64_t kGemvMaxThreads = 256;
inline constexpr int64_t kGemvVector = 8;     // bf16 elements of K per 16-byte load

struct GemvPlan {
  int64_t threads = 0;  // per CTA: a multiple of 32
  int64_t ctas = 0;     // one per kGemvTileRows weight rows of each segment
};

// CTAs of a segment of `rows` weight rows: one per kGemvTileRows of them.
constexpr int64_t gemv_segment_ctas(int64_t rows) { return (rows + kGemvTileRows - 1) / kGemvTileRows; }

// The launch for M input rows of K by segments of `rows` weight rows each.
// Threads: one per 16-byte piece of a weight row, rounded up to whole warps,
// at most kGemvMaxThreads (each thread then takes every threads-th piece).
GemvPlan gemv_plan(int64_t K, std::span<const int64_t> rows);

// Whether the small-batch kernel is the op's choice for M rows of K by
// segments of `rows` weight rows: at one row always, at more only on
// weights small enough that its CUDA-core sums, which grow with M, stay
// hidden behind their bytes (see the .cpp for the measurements).
bool gemv_preferred(int64_t M, int64_t K, std::span<const int64_t> rows);
// The same for SwiGLU's gate/up product of M rows of K by I columns.
bool gemv_swiglu_preferred(int64_t M, int64_t K, int64_t I);

}  // namespace dapo::ops::plan
