// Tensor maps for the TMA kernels (tma_map.h).
#include "runtime/tma_map.h"

#include <cudaTypedefs.h>

#include "common.cuh"

namespace dapo::ops::cuda::detail {
namespace {

// cuTensorMapEncodeTiled from the driver (the runtime library has no
// wrapper); resolved once, an immutable function pointer after that.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DAPO_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    DAPO_CHECK(q == cudaDriverEntryPointSuccess && p != nullptr, "the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap tma_box_map_bf16(const void* base, int64_t rows, int64_t K, int box_rows) {
  constexpr int kBoxK = 64;
  CUtensorMap m{};
  const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(K) * 2};
  const cuuint32_t box[2] = {cuuint32_t(kBoxK), cuuint32_t(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims,
                                          strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DAPO_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (", int(r), ") for a ", rows, " x ", K,
             " bf16 matrix in boxes of ", box_rows, " rows");
  return m;
}

}  // namespace dapo::ops::cuda::detail
