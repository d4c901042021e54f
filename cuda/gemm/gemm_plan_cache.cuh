// The per-device cache of cuBLASLt GEMM plans, shared by matmul.cu (which
// fills in the key and runs the plan) and gemm_plan_cache.cu (which builds
// and owns the descriptors).
//
// A key is cuBLASLt's column-major problem D (m x n) = op(A) (m x k) @ op(B)
// (k x n) with C == D, dense: every leading dimension is the stored matrix's
// row count, so the key fixes the layouts. Pointer alignment is part of the
// key because the heuristic picks kernels by it (a row slice of a view may be
// only 2-byte aligned).
//
// A strided batch (batch > 1) runs `batch` such products: matrix i of A, B
// and C/D starts stride_x elements after matrix i - 1, and so does bias i
// (a stride may be 0: one matrix, or bias, shared by every product). The
// strides are part of the layouts, so of the key; they are never negative
// (cuBLASLt documents no negative batch stride, and Hopper's TMA descriptors
// take unsigned strides).
//
// Determinism: the first algorithm the heuristic returns for a key is kept
// for the life of the device, so one shape always runs one kernel.
//
// Batch invariance (ops::Ctx::batch_invariant): a key with batch_invariant
// runs, for every n (the rows of a linear's input), the algorithm the
// heuristic picks for n = kInvariantRows, with split-K forced off, so that
// each output element is one CTA's sum over k in one order whatever n is.
// (The heuristic alone picks by n: other tiles, split-K for few rows.)
#pragma once

#include <cstdint>
#include <tuple>

#include "common.cuh"

namespace dapo::ops::cuda {

struct GemmKey {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // of cuBLASLt's A and B (column-major)
  cudaDataType_t ab_type = CUDA_R_16BF;   // A and B
  cudaDataType_t cd_type = CUDA_R_16BF;   // C and D (C is D)
  bool bias_epilogue = false;             // CUBLASLT_EPILOGUE_BIAS, bias of type cd_type, length m
  // Guaranteed alignment in bytes of each pointer, capped at 16 (what the
  // Hopper kernels need: TMA wants 16-byte aligned bases). The cap keeps a
  // 256-byte aligned buffer and a 16-byte aligned view of the same shape on
  // the same algorithm, so their bits agree.
  uint8_t align_a = 16, align_b = 16, align_c = 16, align_bias = 16;
  bool batch_invariant = false;
  int32_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_bias = 0;  // elements; used when batch > 1

  auto tie() const {
    return std::tuple(m, n, k, trans_a, trans_b, int(ab_type), int(cd_type), bias_epilogue, align_a, align_b,
                      align_c, align_bias, batch_invariant, batch, stride_a, stride_b, stride_c, stride_bias);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

// The n whose heuristic choice a batch-invariant key runs at every n: a
// prefill's or a training micro-batch's rows, where the products' time is.
constexpr int64_t kInvariantRows = 4096;

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // c also describes D
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: cuBLASLt has no algorithm for this key (kept, so it is asked once)
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // the heuristic's answer when !found
};

// The plan for `key`, built on first use with workspace_bytes of workspace
// allowed. `bias` is the bias pointer of a bias_epilogue key (the heuristic
// reads its alignment from the descriptor), else nullptr. The returned plan
// lives as long as the cache; plan->found says whether it can run. Callers
// set the bias pointer on plan->desc before each run. One host thread per
// device uses a cache (the device's stream is not shared either).
const GemmPlan* gemm_plan_get(GemmPlanCache* cache, cublasLtHandle_t lt, const GemmKey& key,
                              size_t workspace_bytes, const void* bias);

}  // namespace dapo::ops::cuda
