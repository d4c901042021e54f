// Megatron-style tensor-parallel mappings on host tensors; see mappings.h.
#include "dapo/parallel/mappings.h"

#include <cstring>

namespace dapo::parallel {
namespace {

void check_host(const ops::Ctx& ctx, const Tensor& a, const Tensor& b, const char* what) {
  DAPO_CHECK(ctx.backend == ops::Backend::cpu && a.device == Device::cpu && b.device == Device::cpu,
             what, ": no CUDA path yet (the mappings need device copies on ctx's stream; Comm's NCCL "
             "collectives are there)");
  DAPO_CHECK(a.dtype == b.dtype, what, ": dtypes ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
}

bool overlap(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return a.nbytes() && b.nbytes() && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// out = in (same shape); nothing to do when out is in.
void copy_or_alias(Tensor out, Tensor in, const char* what) {
  DAPO_CHECK(out.same_shape(in), what, ": shapes ", out.shape_string(), " and ", in.shape_string());
  if (out.data == in.data) return;
  DAPO_CHECK(!overlap(out, in), what, ": out partly overlaps in");
  if (in.nbytes()) std::memcpy(out.data, in.data, in.nbytes());
}

// full (R..., C) and part (R..., C/tp); returns the slice width C/tp.
int64_t check_split(const Tensor& full, const Tensor& part, int tp, const char* what) {
  bool ok = full.ndim >= 1 && full.ndim == part.ndim && full.size(-1) == int64_t(tp) * part.size(-1);
  for (int i = 0; ok && i + 1 < full.ndim; ++i) ok = full.shape[i] == part.shape[i];
  DAPO_CHECK(ok, what, ": full ", full.shape_string(), " and slice ", part.shape_string(),
             " must agree except in the last dimension, which is ", tp, "x in the full one");
  DAPO_CHECK(!overlap(full, part), what, ": full and slice overlap");
  return part.size(-1);
}

// part = columns [r*w, (r+1)*w) of full.
void take_columns(Tensor part, Tensor full, int r, int64_t w) {
  const size_t es = dtype_size(full.dtype);
  const int64_t cols = full.size(-1);
  const int64_t rows = cols == 0 ? 0 : full.numel() / cols;
  const char* src = static_cast<const char*>(full.data);
  char* dst = static_cast<char*>(part.data);
  if (w == 0) return;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + size_t(i * w) * es, src + size_t(i * cols + r * w) * es, size_t(w) * es);
}

// full = every rank's part side by side along the last dimension.
void gather_columns(const ops::Ctx& ctx, const Comm& tp, Tensor full, Tensor part, int64_t w,
                    const char* what) {
  DAPO_CHECK(ctx.scratch != nullptr, what, " needs ctx.scratch for the gathered temporary");
  DAPO_CHECK(ctx.scratch->device() == Device::cpu, what, ": ctx.scratch is not host memory");
  const int p = tp.size();
  const int64_t rows = w == 0 ? 0 : part.numel() / w;
  ArenaScope scope(*ctx.scratch);
  // (p, rows, w): what all_gather gives, rank-major; then transposed into (rows, p, w).
  Tensor stacked = ctx.scratch->alloc(part.dtype, {int64_t(p) * rows, w});
  tp.all_gather(stacked, part.reshape({rows, w}));
  if (w == 0) return;
  const size_t es = dtype_size(part.dtype);
  const char* src = static_cast<const char*>(stacked.data);
  char* dst = static_cast<char*>(full.data);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    for (int r = 0; r < p; ++r)
      std::memcpy(dst + size_t((i * p + r) * w) * es, src + size_t((r * rows + i) * w) * es,
                  size_t(w) * es);
}

}  // namespace

void copy_to_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_host(ctx, out, in, "copy_to_tp_forward");
  copy_or_alias(out, in, "copy_to_tp_forward");
}

void copy_to_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_host(ctx, din, dout, "copy_to_tp_backward");
  copy_or_alias(din, dout, "copy_to_tp_backward");
  tp.all_reduce(din, ReduceOp::sum);
}

void reduce_from_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_host(ctx, out, in, "reduce_from_tp_forward");
  copy_or_alias(out, in, "reduce_from_tp_forward");
  tp.all_reduce(out, ReduceOp::sum);
}

void reduce_from_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_host(ctx, din, dout, "reduce_from_tp_backward");
  copy_or_alias(din, dout, "reduce_from_tp_backward");
}

void scatter_to_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_host(ctx, out, in, "scatter_to_tp_forward");
  const int64_t w = check_split(in, out, tp.size(), "scatter_to_tp_forward");
  take_columns(out, in, tp.rank(), w);
}

void scatter_to_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_host(ctx, din, dout, "scatter_to_tp_backward");
  const int64_t w = check_split(din, dout, tp.size(), "scatter_to_tp_backward");
  gather_columns(ctx, tp, din, dout, w, "scatter_to_tp_backward");
}

void gather_from_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_host(ctx, out, in, "gather_from_tp_forward");
  const int64_t w = check_split(out, in, tp.size(), "gather_from_tp_forward");
  gather_columns(ctx, tp, out, in, w, "gather_from_tp_forward");
}

void gather_from_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_host(ctx, din, dout, "gather_from_tp_backward");
  const int64_t w = check_split(dout, din, tp.size(), "gather_from_tp_backward");
  take_columns(din, dout, tp.rank(), w);
}

}  // namespace dapo::parallel
