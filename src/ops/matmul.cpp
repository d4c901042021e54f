// Dense matrix products: the contract of matmul.h, checked once, then the
// backend.
#include "dapo/ops/matmul.h"

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;

// The products the header lists: bf16 x bf16 into bf16 or f32, f32 x f32
// into f32 (operands already checked to share `ab`).
void check_product(const char* op, DType ab, const Tensor& out, const char* name) {
  check_float(op, out, name);
  DAPO_CHECK(ab == DType::bf16 || out.dtype == DType::f32, op, ": ", dtype_name(ab), " operands into a ",
             dtype_name(out.dtype), " ", name, "; the products are bf16 x bf16 -> bf16 or f32, and f32 x f32 -> f32");
}

void check_matmul(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const char* op = "matmul";
  check_float(op, a, "a");
  check_dtype(op, b, a.dtype, "b");
  check_product(op, a.dtype, c, "c");
  DAPO_CHECK(c.ndim == 2 && a.ndim == 2 && b.ndim == 2, op, " needs 2-D tensors, got c ", c.shape_string(), " a ",
             a.shape_string(), " b ", b.shape_string());
  const int64_t M = c.shape[0], N = c.shape[1];
  const int64_t K = trans_a ? a.shape[0] : a.shape[1];
  if (trans_a) DAPO_CHECK_SHAPE(a, {K, M});
  else DAPO_CHECK_SHAPE(a, {M, K});
  if (trans_b) DAPO_CHECK_SHAPE(b, {N, K});
  else DAPO_CHECK_SHAPE(b, {K, N});
  DAPO_CHECK(!overlaps(c, a) && !overlaps(c, b), op, ": output c overlaps an input");
}

void check_linear_residual_forward(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& res) {
  const char* op = "linear_residual_forward";
  detail::check_linear_forward(op, out, in, weight, Tensor{});
  check_dtype(op, res, out.dtype, "res");
  DAPO_CHECK_SHAPE(res, {out.shape[0], out.shape[1]});
  // The same buffer is an accumulation; any other overlap would read sums half written.
  DAPO_CHECK(res.data == out.data || !overlaps(out, res), op, ": res overlaps out without being out");
}

void check_linear_backward(const Tensor& din, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                           const Tensor& in, const Tensor& weight) {
  const char* op = "linear_backward";
  check_float(op, in, "in");
  check_dtype(op, dout, in.dtype, "dout");
  check_dtype(op, weight, in.dtype, "weight");
  check_dtype(op, dweight, DType::f32, "dweight");  // fp32 master gradients, accumulated over micro-batches
  DAPO_CHECK(in.ndim == 2 && weight.ndim == 2, op, ": in ", in.shape_string(), " and weight ", weight.shape_string(),
             " must be 2-D");
  const int64_t N = in.shape[0], I = in.shape[1], O = weight.shape[0];
  DAPO_CHECK_SHAPE(weight, {O, I});
  DAPO_CHECK_SHAPE(dout, {N, O});
  DAPO_CHECK_SHAPE(dweight, {O, I});
  DAPO_CHECK(!overlaps(dweight, dout) && !overlaps(dweight, in) && !overlaps(dweight, weight), op,
             ": dweight overlaps an input");
  if (din.defined()) {
    check_product(op, in.dtype, din, "din");
    DAPO_CHECK_SHAPE(din, {N, I});
    // din is written before dweight reads dout and in.
    DAPO_CHECK(!overlaps(din, dweight) && !overlaps(din, dout) && !overlaps(din, in) && !overlaps(din, weight), op,
               ": din overlaps dweight or an input");
  }
  if (dbias.defined()) {
    check_dtype(op, dbias, DType::f32, "dbias");
    DAPO_CHECK_SHAPE(dbias, {O});
    DAPO_CHECK(!overlaps(dbias, dweight) && !overlaps(dbias, dout) && !overlaps(dbias, in) &&
                   !overlaps(dbias, weight) && (!din.defined() || !overlaps(dbias, din)),
               op, ": dbias overlaps another tensor");
  }
}

}  // namespace

void detail::check_linear_forward(const char* op, const Tensor& out, const Tensor& in, const Tensor& weight,
                                  const Tensor& bias) {
  check_float(op, in, "in");
  check_dtype(op, weight, in.dtype, "weight");
  check_product(op, in.dtype, out, "out");
  DAPO_CHECK(in.ndim == 2 && weight.ndim == 2, op, ": in ", in.shape_string(), " and weight ", weight.shape_string(),
             " must be 2-D");
  const int64_t N = in.shape[0], I = in.shape[1], O = weight.shape[0];
  DAPO_CHECK_SHAPE(weight, {O, I});
  DAPO_CHECK_SHAPE(out, {N, O});
  DAPO_CHECK(!overlaps(out, in) && !overlaps(out, weight), op, ": out overlaps in or weight");
  if (bias.defined()) {
    check_float(op, bias, "bias");
    DAPO_CHECK_SHAPE(bias, {O});
    DAPO_CHECK(!overlaps(out, bias), op, ": out overlaps bias");
  }
}

void matmul(const Ctx& ctx, Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  check_matmul(c, a, b, trans_a, trans_b);
  DAPO_DISPATCH(ctx, matmul, c, a, b, trans_a, trans_b, alpha, beta);
}

void linear_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias) {
  detail::check_linear_forward("linear_forward", out, in, weight, bias);
  DAPO_DISPATCH(ctx, linear_forward, out, in, weight, bias);
}

void linear_residual_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor res) {
  check_linear_residual_forward(out, in, weight, res);
  DAPO_DISPATCH(ctx, linear_residual_forward, out, in, weight, res);
}

bool linear_residual_preferred(const Ctx& ctx, int64_t N) {
#ifdef DAPO_WITH_CUDA
  // Batch-invariant: the trainer's path (the product, then the residual
  // added in residual_rmsnorm), whatever the row count.
  return ctx.backend != Backend::cpu && !ctx.batch_invariant && N >= cuda::detail::kLinearResidualMinRows;
#else
  (void)ctx, (void)N;
  return false;
#endif
}

void linear_backward(const Ctx& ctx, Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                     Tensor in, Tensor weight) {
  check_linear_backward(din, dweight, dbias, dout, in, weight);
  DAPO_DISPATCH(ctx, linear_backward, din, dweight, dbias, dout, in, weight);
}

}  // namespace dapo::ops
