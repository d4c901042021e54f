// CUDA folded norm (norm_fold.h): linear_residual_fold on the skinny
// product's epilogue (linear_multi.cu) where it takes the product, else the
// product into y then one pass here; and row_norm_apply, the consumers'
// fallback.
#include "common.cuh"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/plan/swiglu_plan.h"
#include "norm/norm_fold.cuh"
#include "ptx/pdl.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

// Threads of a residual_fold_kernel block (whole warps: one per (row, part))
// and of a row_norm_apply_kernel block (one block a row); the kernels stride
// by blockDim.
constexpr int kFoldThreads = 256;
constexpr int kRowNormThreads = 256;
static_assert(kFoldThreads % 32 == 0, "residual_fold_kernel's warps leave whole");

// One warp per (row, part): lane c of part p holds column 32p + c. The
// product is in y; sum = res + the product and y = sum * w overwrite it with
// the skinny epilogue's arithmetic, and the part's squares are summed by a
// fixed shuffle tree over the 32 lanes (the epilogue's lanes hold 4 columns
// each, so the two paths' sums may differ in their last bits; each path's
// are always the same).
__global__ void residual_fold_kernel(bf16_t* sum, bf16_t* y, float* ssq, const bf16_t* res, const bf16_t* w,
                                     int M, int C, int P) {
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (item >= int64_t(M) * P) return;  // whole warps leave together
  const int m = int(item / P), p = int(item % P), c = p * 32 + lane;
  float sq = 0.0f;
  if (c < C) {
    const int64_t at = int64_t(m) * C + c;
    const float prod = __bfloat162float(y[at]);
    const float s = __bfloat162float(__float2bfloat16_rn(__bfloat162float(res[at]) + prod));
    sum[at] = __float2bfloat16_rn(s);
    y[at] = __float2bfloat16_rn(s * __bfloat162float(w[c]));
    sq = s * s;
  }
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  if (lane == 0) ssq[int64_t(m) * P + p] = sq;
}

// One CTA per row: the row's rstd, then x *= rstd, rounded once.
template <class T>
__global__ void row_norm_apply_kernel(T* x, const float* ssq, int M, int C, int P, float inv_c, float eps) {
  pdl_wait();
  pdl_launch_dependents();
  const int m = int(blockIdx.x);
  const float rs = row_rstd(ssq, P, m, inv_c, eps);
  T* row = x + int64_t(m) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) store_f32(row, c, load_f32(row, c) * rs);
}

}  // namespace

bool detail::norm_fold_preferred(int64_t M, int64_t C, int64_t I) {
  return plan::norm_fold_preferred(M, C, I, detail::skinny_gpu());
}

// The contract (shapes, one dtype for all but ssq, aliasing) is checked by
// ops::linear_residual_fold; here the kernels' limits.
void linear_residual_fold(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight, Tensor res,
                          Tensor norm_weight) {
  DAPO_CHECK(in.dtype == DType::bf16, "linear_residual_fold: in is ", dtype_name(in.dtype),
             ", expected bf16 (the CUDA fold has bf16 kernels only)");
  const int64_t M = in.shape[0], C = weight.shape[0], P = norm_fold_parts(C);
  if (M == 0 || C == 0) return;
  DAPO_CHECK(M * P <= INT32_MAX / 32 && C <= INT32_MAX, "linear_residual_fold: ", M, " rows of ", C);
  if (detail::linear_residual_fold_supported(y, in, weight))
    return detail::linear_residual_fold_skinny(ctx, sum, y, ssq, in, weight, res, norm_weight);
  cuda::linear_forward(ctx, y, in, weight, Tensor{});
  const int64_t threads = M * P * 32;
  DAPO_CUDA_CHECK(launch_pdl(residual_fold_kernel, dim3(unsigned((threads + kFoldThreads - 1) / kFoldThreads)),
                             dim3(kFoldThreads), 0, stream_of(ctx), static_cast<bf16_t*>(sum.data),
                             static_cast<bf16_t*>(y.data), ssq.ptr<float>(), static_cast<const bf16_t*>(res.data),
                             static_cast<const bf16_t*>(norm_weight.data), int(M), int(C), int(P)));
}

// The contract (shapes, rn) is checked by ops::row_norm_apply.
void row_norm_apply(const Ctx& ctx, Tensor x, const RowNorm& rn) {
  const int64_t M = x.shape[0], C = x.shape[1];
  DAPO_CHECK(M <= INT32_MAX && C <= INT32_MAX, "row_norm_apply: ", M, " rows of ", C);
  if (M == 0 || C == 0) return;
  const int P = int(norm_fold_parts(C));
  const float inv_c = 1.0f / float(C);
  if (x.dtype == DType::bf16)
    DAPO_CUDA_CHECK(launch_pdl(row_norm_apply_kernel<bf16_t>, dim3(unsigned(M)), dim3(kRowNormThreads), 0,
                               stream_of(ctx), static_cast<bf16_t*>(x.data), rn.ssq.ptr<float>(), int(M), int(C), P,
                               inv_c, rn.eps));
  else
    DAPO_CUDA_CHECK(launch_pdl(row_norm_apply_kernel<float>, dim3(unsigned(M)), dim3(kRowNormThreads), 0,
                               stream_of(ctx), x.ptr<float>(), rn.ssq.ptr<float>(), int(M), int(C), P, inv_c, rn.eps));
}

}  // namespace dapo::ops::cuda
