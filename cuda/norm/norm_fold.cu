// CUDA folded norm (norm_fold.h): linear_residual_fold on the skinny
// product's epilogue (linear_multi.cu) where it takes the product, else the
// product into y then one pass here; and row_norm_apply, the consumers'
// fallback.
#include "common.cuh"
#include "dapo/ops/linear_multi.h"
#include "dapo/ops/linear_swiglu.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "norm/norm_fold.cuh"
#include "ptx/pdl.cuh"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;
using bf16_t = __nv_bfloat16;

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

void check_bf16(const Ctx& ctx, const Tensor& t, const char* name) {
  check_device(ctx, t, name);
  DAPO_CHECK(t.dtype == DType::bf16, "linear_residual_fold: ", name, " is ", dtype_name(t.dtype), ", expected bf16");
}

}  // namespace

bool detail::norm_fold_preferred(int64_t M, int64_t C, int64_t I) {
  if (M < 1 || M > 128 || C % 4 != 0) return false;
  if (!detail::linear_swiglu_preferred(M, C, I) || !detail::linear_swiglu_plan(M, C, I).deep) return false;
  return M <= 64 || detail::linear_residual_fold_one_wave(M, C, C);
}

void linear_residual_fold(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight, Tensor res,
                          Tensor norm_weight) {
  for (const auto& [t, name] : {std::pair{&sum, "sum"}, {&y, "y"}, {&in, "in"}, {&weight, "weight"}, {&res, "res"},
                                {&norm_weight, "norm_weight"}})
    check_bf16(ctx, *t, name);
  check_device(ctx, ssq, "ssq");
  ops::detail::check_linear_residual_fold(sum, y, ssq, in, weight, res, norm_weight);
  const int64_t M = in.shape[0], C = weight.shape[0], P = norm_fold_parts(C);
  if (M == 0 || C == 0) return;
  DAPO_CHECK(M * P <= INT32_MAX / 32 && C <= INT32_MAX, "linear_residual_fold: ", M, " rows of ", C);
  if (detail::linear_residual_fold_supported(y, in, weight))
    return detail::linear_residual_fold_skinny(ctx, sum, y, ssq, in, weight, res, norm_weight);
  cuda::linear_forward(ctx, y, in, weight, Tensor{});
  const int64_t threads = M * P * 32;
  DAPO_CUDA_CHECK(launch_pdl(residual_fold_kernel, dim3(unsigned((threads + 255) / 256)), dim3(256), 0,
                             stream_of(ctx), static_cast<bf16_t*>(sum.data), static_cast<bf16_t*>(y.data),
                             ssq.ptr<float>(), static_cast<const bf16_t*>(res.data),
                             static_cast<const bf16_t*>(norm_weight.data), int(M), int(C), int(P)));
}

void row_norm_apply(const Ctx& ctx, Tensor x, const RowNorm& rn) {
  check_device(ctx, x, "x");
  DAPO_CHECK(x.ndim == 2 && (x.dtype == DType::bf16 || x.dtype == DType::f32), "row_norm_apply: x ",
             dtype_name(x.dtype), " ", x.shape_string(), " must be (M, C) bf16 or f32");
  const int64_t M = x.shape[0], C = x.shape[1];
  ops::detail::check_row_norm(rn, M, C, "row_norm_apply");
  check_device(ctx, rn.ssq, "ssq");
  DAPO_CHECK(!overlaps(x, rn.ssq), "row_norm_apply: x overlaps ssq");
  DAPO_CHECK(M <= INT32_MAX && C <= INT32_MAX, "row_norm_apply: ", M, " rows of ", C);
  if (M == 0 || C == 0) return;
  const int P = int(norm_fold_parts(C));
  const float inv_c = 1.0f / float(C);
  if (x.dtype == DType::bf16)
    DAPO_CUDA_CHECK(launch_pdl(row_norm_apply_kernel<bf16_t>, dim3(unsigned(M)), dim3(256), 0, stream_of(ctx),
                               static_cast<bf16_t*>(x.data), rn.ssq.ptr<float>(), int(M), int(C), P, inv_c, rn.eps));
  else
    DAPO_CUDA_CHECK(launch_pdl(row_norm_apply_kernel<float>, dim3(unsigned(M)), dim3(256), 0, stream_of(ctx),
                               x.ptr<float>(), rn.ssq.ptr<float>(), int(M), int(C), P, inv_c, rn.eps));
}

}  // namespace dapo::ops::cuda
