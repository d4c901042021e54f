// Causal GQA attention over packed sequences: the contract of attention.h,
// checked once, then the backend. What only a backend can check stays
// there: the CPU reads cu_seqlens on the host and validates it against T and
// max_seqlen; CUDA checks its kernels' head dims, dtype and alignment.
#include "dapo/ops/attention.h"

#include <cmath>

#include "cuda/cuda_ops.h"
#include "src/ops/dispatch.h"
#include "src/ops/backend_shared.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops {
namespace {

using detail::check_dtype;
using detail::check_float;
using detail::check_outputs_apart;

struct Dims {
  int64_t T, Hq, Hkv, D;
};

// What both directions share: q (T, Hq, D) f32 or bf16, k and v (T, Hkv, D)
// of q's dtype with Hq % Hkv == 0, cu_seqlens (B+1) i32, the scalars.
Dims check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& cu_seqlens, int64_t max_seqlen, float scale) {
  check_float(op, q, "q");
  check_dtype(op, k, q.dtype, "k");
  check_dtype(op, v, q.dtype, "v");
  check_dtype(op, cu_seqlens, DType::i32, "cu_seqlens");
  DAPO_CHECK(q.ndim == 3 && k.ndim == 3, op, ": q ", q.shape_string(), " and k ", k.shape_string(),
             " must be (T, H, D)");
  const Dims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2]};
  DAPO_CHECK(d.Hkv > 0 && d.Hq % d.Hkv == 0, op, ": Hq = ", d.Hq, " is not a multiple of Hkv = ", d.Hkv);
  DAPO_CHECK_SHAPE(k, {d.T, d.Hkv, d.D});
  DAPO_CHECK_SHAPE(v, {d.T, d.Hkv, d.D});
  DAPO_CHECK(cu_seqlens.ndim == 1 && cu_seqlens.shape[0] >= 1, op, ": cu_seqlens ", cu_seqlens.shape_string(),
             " must be (B+1)");
  DAPO_CHECK(max_seqlen >= 0, op, ": max_seqlen = ", max_seqlen);
  DAPO_CHECK(std::isfinite(scale), op, ": scale ", scale, " is not finite");
  return d;
}

void check_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen, float scale) {
  const char* op = "attention_forward";
  const Dims d = check_inputs(op, q, k, v, cu_seqlens, max_seqlen, scale);
  check_dtype(op, out, q.dtype, "out");
  check_dtype(op, lse, DType::f32, "lse");
  DAPO_CHECK_SHAPE(out, {d.T, d.Hq, d.D});
  DAPO_CHECK_SHAPE(lse, {d.Hq, d.T});
  check_outputs_apart(op, {{out, "out"}, {lse, "lse"}}, {{q, "q"}, {k, "k"}, {v, "v"}, {cu_seqlens, "cu_seqlens"}});
}

void check_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen,
                              float scale) {
  const char* op = "attention_backward";
  const Dims d = check_inputs(op, q, k, v, cu_seqlens, max_seqlen, scale);
  check_dtype(op, dq, q.dtype, "dq");
  check_dtype(op, dk, q.dtype, "dk");
  check_dtype(op, dv, q.dtype, "dv");
  check_dtype(op, dout, q.dtype, "dout");
  check_dtype(op, out, q.dtype, "out");
  check_dtype(op, lse, DType::f32, "lse");
  DAPO_CHECK_SHAPE(dq, {d.T, d.Hq, d.D});
  DAPO_CHECK_SHAPE(dk, {d.T, d.Hkv, d.D});
  DAPO_CHECK_SHAPE(dv, {d.T, d.Hkv, d.D});
  DAPO_CHECK_SHAPE(dout, {d.T, d.Hq, d.D});
  DAPO_CHECK_SHAPE(out, {d.T, d.Hq, d.D});
  DAPO_CHECK_SHAPE(lse, {d.Hq, d.T});
  check_outputs_apart(op, {{dq, "dq"}, {dk, "dk"}, {dv, "dv"}},
                      {{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                       {cu_seqlens, "cu_seqlens"}});
}

}  // namespace

void attention_forward(const Ctx& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                       Tensor cu_seqlens, int64_t max_seqlen, float scale) {
  check_attention_forward(out, lse, q, k, v, cu_seqlens, max_seqlen, scale);
  DAPO_DISPATCH(ctx, attention_forward, out, lse, q, k, v, cu_seqlens, max_seqlen, scale);
}

void attention_backward(const Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                        Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens, int64_t max_seqlen,
                        float scale) {
  check_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, max_seqlen, scale);
  DAPO_DISPATCH(ctx, attention_backward, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, max_seqlen, scale);
}

}  // namespace dapo::ops
