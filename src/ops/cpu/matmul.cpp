// CPU reference of the dense matrix products: OpenBLAS sgemm for the
// products, OpenMP for the bias broadcast and the bias-gradient row sum.
// Under Ctx::batch_invariant the forward products take a fixed-order dot
// product instead: OpenBLAS picks kernels and blockings by shape (a one-row
// product may become a gemv), so a row's bits would depend on its batch.
#include "dapo/ops/matmul.h"
#include "cpu_check.h"
#include "src/ops/cpu/cpu_ops.h"

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

// Lanes of the fixed-order dot product: 16 partial sums (k mod 16), then a
// fixed pairwise tree over the lanes, then the tail. The order is set by K
// alone; the build targets baseline x86-64 (no FMA contraction), so the
// compiled arithmetic is the same for every call.
constexpr int64_t kLanes = 16;

// noinline: every dot of every call runs this one compiled body.
[[gnu::noinline]] float fixed_order_dot(const float* a, const float* b, int64_t K) {
  float lane[kLanes] = {};
  const int64_t full = K - K % kLanes;
  for (int64_t k = 0; k < full; k += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lane[j] += a[k + j] * b[k + j];
  for (int64_t w = kLanes / 2; w >= 1; w /= 2)
    for (int64_t j = 0; j < w; ++j) lane[j] += lane[j + w];
  float s = lane[0];
  for (int64_t k = full; k < K; ++k) s += a[k] * b[k];
  return s;
}

// out (N, O) = (accumulate ? out : 0) + in (N, K) @ weight (O, K)^T, each
// element one fixed_order_dot added once: a row's bits do not depend on N,
// on the other rows or on the thread count. Tiles of 64 weight rows keep
// the weights in cache across the rows of a tile.
void batch_invariant_linear(float* out, const float* in, const float* weight, int64_t N, int64_t O, int64_t K,
                            bool accumulate) {
  constexpr int64_t kTile = 64;
  const int64_t tiles = (O + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o1 = std::min(O, (t + 1) * kTile);
      for (int64_t o = t * kTile; o < o1; ++o) {
        const float d = fixed_order_dot(in + n * K, weight + o * K, K);
        float& y = out[n * O + o];
        y = accumulate ? y + d : d;
      }
    }
}

}  // namespace

// The contract is checked by ops::matmul (and by the ops whose products run
// here); the reference computes in f32.
void matmul(const Ctx&, Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  check_f32(a, "a");  // then b and c are f32 too (the contract's products)
  const int64_t M = c.shape[0], N = c.shape[1];
  const int64_t K = trans_a ? a.shape[0] : a.shape[1];
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

// The contract is checked by ops::linear_forward, or by the op whose
// product this is (linear_forward_multi, linear_residual_fold, lm_head_sample).
void linear_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias) {
  check_f32(in, "in");  // then weight and out are f32 too; the bias may not be
  const int64_t N = in.shape[0], O = weight.shape[0];
  const bool has_bias = bias.defined();
  if (has_bias) {
    check_f32(bias, "bias");
    // Seed out with the bias and let the GEMM add to it (beta = 1): one pass
    // over out instead of a second sweep after the product.
    float* o = out.ptr<float>();
    const float* bp = bias.ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::memcpy(o + n * O, bp, size_t(O) * sizeof(float));
  }
  if (ctx.batch_invariant) {
    batch_invariant_linear(out.ptr<float>(), in.ptr<float>(), weight.ptr<float>(), N, O, in.shape[1], has_bias);
    return;
  }
  cpu::matmul(ctx, out, in, weight, false, true, 1.0f, has_bias ? 1.0f : 0.0f);
}

// The contract is checked by ops::linear_residual_forward.
void linear_residual_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor res) {
  check_f32(in, "in");  // then weight, out and res are f32 too
  const int64_t N = in.shape[0], O = weight.shape[0];
  const bool in_place = res.data == out.data;
  // Seed out with res and let the GEMM add the product to it (beta = 1).
  if (!in_place) std::memcpy(out.ptr<float>(), res.ptr<float>(), size_t(N * O) * sizeof(float));
  if (ctx.batch_invariant) {
    batch_invariant_linear(out.ptr<float>(), in.ptr<float>(), weight.ptr<float>(), N, O, in.shape[1], true);
    return;
  }
  cpu::matmul(ctx, out, in, weight, false, true, 1.0f, 1.0f);
}

// The contract is checked by ops::linear_backward.
void linear_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor in, Tensor weight) {
  check_f32(in, "in");
  const int64_t N = in.shape[0], O = weight.shape[0];
  if (din.defined()) {
    cpu::matmul(ctx, din, dout, weight, false, false, 1.0f, 0.0f);  // (N,O) @ (O,I)
  }
  cpu::matmul(ctx, dweight, dout, in, true, false, 1.0f, 1.0f);  // (O,N) @ (N,I), +=

  if (dbias.defined()) {
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
