// How CUDA's fused gate/up products and SwiGLU (matmul.h) are
// planned, on the host from plain values: the shape (M input rows, K, I h
// columns), the GPU's SM count and whether the sm_90a kernels are built.
// The kernel files (cuda/gemm/linear_swiglu.cu, linear_swiglu_wide.cu)
// instantiate their tiles from the constants here and launch what these
// functions decide; the decisions are tested without a GPU
// (tests/ops/test_swiglu_plan.cpp). Also the decode step's norm-fold rule
// (norm_fold.h), which rests on the fused tile's plan.
#pragma once

#include <array>
#include <cstdint>

#include "dapo/ops/plan/skinny_gemm_plan.h"

namespace dapo::ops::plan {

// The fused (decode) kernel: tiles of `cols` h columns (gate rows, and as
// many up rows: wgmma's N is twice that, 32 to 192) x 64 or 128 input rows.
inline constexpr std::array<int, 8> kSwigluWidths = {16, 24, 32, 40, 48, 64, 80, 96};
inline constexpr int kSwigluBK = 64;  // k per stage: 128-byte rows, the swizzle's span

// The wide (prefill) kernel: items of 128 input rows x 128 h columns.
inline constexpr int kSwigluWideRows = 128;
inline constexpr int kSwigluWideCols = 128;

// The fused launch's tile: h columns (one of kSwigluWidths) per CTA, and
// input rows per CTA (64 or 128). cols == 0: no fused plan.
struct SwigluPlan {
  int cols = 0;
  int rows = 0;
  bool deep = false;  // a ring of up to 160 KB instead of 112 (one CTA an SM)
};

// Whether the fused launch is the op's choice for M rows of K by I (where
// the kernel can take the tensors).
bool swiglu_fused_preferred(int64_t M, int64_t K, int64_t I);
// The fused launch's plan on a GPU of sm_count SMs.
SwigluPlan swiglu_fused_plan(int64_t M, int64_t K, int64_t I, int sm_count);
// Whether the wide kernel is the op's choice (`built`: an sm_90a build).
bool swiglu_wide_preferred(int64_t M, int64_t K, int64_t I, bool built);

// Whether a decode step of M rows of a model with hidden size C and MLP
// width I should fold its norms (norm_fold.h) on `gpu`.
bool norm_fold_preferred(int64_t M, int64_t C, int64_t I, const SkinnyGpu& gpu);

}  // namespace dapo::ops::plan
