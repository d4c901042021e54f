// CPU reference of the folded norm (norm_fold.h): the product, the add, the
// row statistics in parts, and the row scale, in fp32 with the parts' sums
// in the order the header gives.
#include "dapo/ops/norm_fold.h"

#include <algorithm>
#include <cmath>

#include "cpu_check.h"
#include "dapo/ops/matmul.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops::cpu {

using detail::check_f32;

// The contract (one dtype for all but ssq, shapes, aliasing) is checked by
// ops::linear_residual_fold; the reference computes in f32.
void linear_residual_fold(const Ctx& ctx, Tensor sum, Tensor y, Tensor ssq, Tensor in, Tensor weight, Tensor res,
                          Tensor norm_weight) {
  check_f32(in, "in");
  const int64_t M = in.shape[0], C = weight.shape[0], P = norm_fold_parts(C);
  // The product into y (which overlaps nothing), then y is overwritten row by row.
  cpu::linear_forward(ctx, y, in, weight, Tensor{});
  float* s = sum.ptr<float>();
  float* o = y.ptr<float>();
  float* q = ssq.ptr<float>();
  const float* r = res.ptr<float>();
  const float* w = norm_weight.ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t p = 0; p < P; ++p) {
      float part = 0.0f;
      for (int64_t c = p * kNormFoldPart; c < std::min(C, (p + 1) * kNormFoldPart); ++c) {
        const int64_t i = m * C + c;
        const float v = r[i] + o[i];
        s[i] = v;
        o[i] = v * w[c];
        part += v * v;
      }
      q[m * P + p] = part;
    }
  }
}

// The contract is checked by ops::row_norm_apply (or the op whose input
// rows these are); the reference computes in f32.
void row_norm_apply(const Ctx&, Tensor x, const RowNorm& rn) {
  check_f32(x, "x");
  const int64_t M = x.shape[0], C = x.shape[1], P = norm_fold_parts(C);
  float* v = x.ptr<float>();
  const float* q = rn.ssq.ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    float total = 0.0f;
    for (int64_t p = 0; p < P; ++p) total += q[m * P + p];
    const float rstd = 1.0f / std::sqrt(total / float(C) + rn.eps);
    for (int64_t c = 0; c < C; ++c) v[m * C + c] *= rstd;
  }
}

}  // namespace dapo::ops::cpu
