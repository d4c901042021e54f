// CPU reference of the dense matrix products: OpenBLAS sgemm for the
// products, OpenMP for the bias broadcast and the bias-gradient row sum.
#include "dapo/ops/matmul.h"
#include "cpu_check.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace dapo::ops::cpu {
namespace {

// Columns per task of the bias-gradient sum: a task owns whole columns and
// walks the rows in order, so the sum does not depend on the thread count.
constexpr int64_t kColumnChunk = 64;

// An optional argument left out is Tensor{}: no dimensions and no data.

using detail::check_f32;

// BLAS takes int sizes (OpenBLAS without INTERFACE64).
int blas_int(int64_t v, const char* what) {
  DAPO_CHECK(v <= INT_MAX, what, " = ", v, " exceeds the BLAS int range");
  return int(v);
}

// The checks linear_forward and linear_residual_forward share (f32 out, in
// and weight of matching 2-D shapes), failing in the name of `op`.
void check_linear(const Tensor& out, const Tensor& in, const Tensor& weight, const char* op) {
  check_f32(out, "out");
  check_f32(in, "in");
  check_f32(weight, "weight");
  DAPO_CHECK(in.ndim == 2 && weight.ndim == 2, op, ": in ", in.shape_string(), " and weight ",
             weight.shape_string(), " must be 2-D");
  DAPO_CHECK_SHAPE(weight, {weight.shape[0], in.shape[1]});
  DAPO_CHECK_SHAPE(out, {in.shape[0], weight.shape[0]});
}

}  // namespace

void matmul(const Ctx&, Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  check_f32(c, "c");
  check_f32(a, "a");
  check_f32(b, "b");
  DAPO_CHECK(c.ndim == 2 && a.ndim == 2 && b.ndim == 2, "matmul needs 2-D tensors, got c ",
             c.shape_string(), " a ", a.shape_string(), " b ", b.shape_string());
  const int64_t M = c.shape[0], N = c.shape[1];
  const int64_t K = trans_a ? a.shape[0] : a.shape[1];
  if (trans_a) DAPO_CHECK_SHAPE(a, {K, M});
  else DAPO_CHECK_SHAPE(a, {M, K});
  if (trans_b) DAPO_CHECK_SHAPE(b, {N, K});
  else DAPO_CHECK_SHAPE(b, {K, N});
  DAPO_CHECK(!overlaps(c, a) && !overlaps(c, b), "matmul output c overlaps an input");
  if (M == 0 || N == 0) return;
  float* cp = c.ptr<float>();
  if (K == 0) {
    // An empty sum; BLAS would reject lda = 0 instead of computing beta*C.
    const int64_t n = M * N;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) cp[i] = beta == 0.0f ? 0.0f : beta * cp[i];
    return;
  }
  // Row-major leading dimensions are each matrix's own column count.
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              blas_int(M, "M"), blas_int(N, "N"), blas_int(K, "K"), alpha, a.ptr<float>(),
              blas_int(a.shape[1], "lda"), b.ptr<float>(), blas_int(b.shape[1], "ldb"), beta, cp,
              blas_int(N, "ldc"));
}

void linear_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias) {
  check_linear(out, in, weight, "linear_forward");
  const int64_t N = in.shape[0], O = weight.shape[0];
  const bool has_bias = bias.defined();
  if (has_bias) {
    check_f32(bias, "bias");
    DAPO_CHECK_SHAPE(bias, {O});
    DAPO_CHECK(!overlaps(out, bias), "linear_forward: out overlaps bias");
    // Seed out with the bias and let the GEMM add to it (beta = 1): one pass
    // over out instead of a second sweep after the product.
    float* o = out.ptr<float>();
    const float* bp = bias.ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::memcpy(o + n * O, bp, size_t(O) * sizeof(float));
  }
  cpu::matmul(ctx, out, in, weight, false, true, 1.0f, has_bias ? 1.0f : 0.0f);
}

void linear_residual_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor res) {
  check_linear(out, in, weight, "linear_residual_forward");
  check_f32(res, "res");
  const int64_t N = in.shape[0], O = weight.shape[0];
  DAPO_CHECK_SHAPE(res, {N, O});
  const bool in_place = res.data == out.data;
  DAPO_CHECK(in_place || !overlaps(out, res), "linear_residual_forward: res overlaps out without being out");
  DAPO_CHECK(!overlaps(out, in) && !overlaps(out, weight), "linear_residual_forward: out overlaps in or weight");
  // Seed out with res and let the GEMM add the product to it (beta = 1).
  if (!in_place) std::memcpy(out.ptr<float>(), res.ptr<float>(), size_t(N * O) * sizeof(float));
  cpu::matmul(ctx, out, in, weight, false, true, 1.0f, 1.0f);
}

void linear_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor in, Tensor weight) {
  check_f32(dweight, "dweight");
  check_f32(dout, "dout");
  check_f32(in, "in");
  check_f32(weight, "weight");
  DAPO_CHECK(in.ndim == 2 && weight.ndim == 2, "linear_backward: in ", in.shape_string(),
             " and weight ", weight.shape_string(), " must be 2-D");
  const int64_t N = in.shape[0], I = in.shape[1], O = weight.shape[0];
  DAPO_CHECK_SHAPE(weight, {O, I});
  DAPO_CHECK_SHAPE(dout, {N, O});
  DAPO_CHECK_SHAPE(dweight, {O, I});

  if (din.defined()) {
    check_f32(din, "din");
    DAPO_CHECK_SHAPE(din, {N, I});
    DAPO_CHECK(!overlaps(din, dweight), "linear_backward: din overlaps dweight");
    cpu::matmul(ctx, din, dout, weight, false, false, 1.0f, 0.0f);  // (N,O) @ (O,I)
  }
  cpu::matmul(ctx, dweight, dout, in, true, false, 1.0f, 1.0f);  // (O,N) @ (N,I), +=

  if (dbias.defined()) {
    check_f32(dbias, "dbias");
    DAPO_CHECK_SHAPE(dbias, {O});
    DAPO_CHECK(!overlaps(dbias, dweight) && !overlaps(dbias, dout), "linear_backward: dbias overlaps");
    float* db = dbias.ptr<float>();
    const float* g = dout.ptr<float>();
    const int64_t chunks = (O + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t o0 = ch * kColumnChunk;
      const int64_t len = std::min(kColumnChunk, O - o0);
      double acc[kColumnChunk] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* row = g + n * O + o0;
        for (int64_t j = 0; j < len; ++j) acc[j] += row[j];
      }
      for (int64_t j = 0; j < len; ++j) db[o0 + j] += float(acc[j]);
    }
  }
}

}  // namespace dapo::ops::cpu
