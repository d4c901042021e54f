// Megatron-style tensor-parallel mappings on host tensors (MPI) and device
// tensors (NCCL, copies on ctx's stream); see mappings.h.
#include "dapo/parallel/mappings.h"

#include <cstring>

#ifdef DAPO_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dapo::parallel {
namespace {

// Both tensors on the Ctx's device, same dtype.
void check_args(const ops::Ctx& ctx, const Tensor& a, const Tensor& b, const char* what) {
  const Device dev = ops::backend_device(ctx.backend);
  DAPO_CHECK((a.device == dev || a.numel() == 0) && (b.device == dev || b.numel() == 0), what, ": tensors on ",
             device_name(a.device), " and ", device_name(b.device), ", the Ctx runs on ", device_name(dev));
  DAPO_CHECK(a.dtype == b.dtype, what, ": dtypes ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
}

// A 2-D strided copy (rows of `width` bytes) on the Ctx's device: memcpy
// rows on the host, cudaMemcpy2DAsync on ctx's stream on the GPU.
void copy_rows(const ops::Ctx& ctx, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               int64_t rows) {
  if (rows == 0 || width == 0) return;
  if (ctx.backend == ops::Backend::cpu) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) std::memcpy(d + size_t(i) * dst_pitch, s + size_t(i) * src_pitch, width);
    return;
  }
#ifdef DAPO_WITH_CUDA
  const cudaError_t err = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, size_t(rows),
                                            cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx.stream));
  DAPO_CHECK(err == cudaSuccess, "cudaMemcpy2DAsync in a tp mapping: ", cudaGetErrorString(err));
#else
  DAPO_FAIL("a CUDA Ctx in a build without CUDA");
#endif
}

// out = in (same shape); nothing to do when out is in.
void copy_or_alias(const ops::Ctx& ctx, Tensor out, Tensor in, const char* what) {
  DAPO_CHECK(out.same_shape(in), what, ": shapes ", out.shape_string(), " and ", in.shape_string());
  if (out.data == in.data) return;
  DAPO_CHECK(!overlaps(out, in), what, ": out partly overlaps in");
  copy_rows(ctx, out.data, in.nbytes(), in.data, in.nbytes(), in.nbytes(), 1);
}

// full (R..., C) and part (R..., C/tp); returns the slice width C/tp.
int64_t check_split(const Tensor& full, const Tensor& part, int tp, const char* what) {
  bool ok = full.ndim >= 1 && full.ndim == part.ndim && full.size(-1) == int64_t(tp) * part.size(-1);
  for (int i = 0; ok && i + 1 < full.ndim; ++i) ok = full.shape[i] == part.shape[i];
  DAPO_CHECK(ok, what, ": full ", full.shape_string(), " and slice ", part.shape_string(),
             " must agree except in the last dimension, which is ", tp, "x in the full one");
  DAPO_CHECK(!overlaps(full, part), what, ": full and slice overlap");
  return part.size(-1);
}

// part = columns [r*w, (r+1)*w) of full.
void take_columns(const ops::Ctx& ctx, Tensor part, Tensor full, int r, int64_t w) {
  const size_t es = dtype_size(full.dtype);
  const int64_t cols = full.size(-1);
  const int64_t rows = cols == 0 ? 0 : full.numel() / cols;
  if (w == 0) return;
  copy_rows(ctx, part.data, size_t(w) * es, static_cast<const char*>(full.data) + size_t(r * w) * es,
            size_t(cols) * es, size_t(w) * es, rows);
}

// full = every rank's part side by side along the last dimension.
void gather_columns(const ops::Ctx& ctx, const Comm& tp, Tensor full, Tensor part, int64_t w,
                    const char* what) {
  DAPO_CHECK(ctx.scratch != nullptr, what, " needs ctx.scratch for the gathered temporary");
  DAPO_CHECK(ctx.scratch->device() == ops::backend_device(ctx.backend), what, ": ctx.scratch is on ",
             device_name(ctx.scratch->device()));
  const int p = tp.size();
  if (p == 1) {  // the part is the whole: one copy (none if they alias), no all-gather stage
    copy_or_alias(ctx, full, part, what);
    return;
  }
  const int64_t rows = w == 0 ? 0 : part.numel() / w;
  ArenaScope scope(*ctx.scratch);
  // (p, rows, w): what all_gather gives, rank-major; then transposed into (rows, p, w).
  Tensor stacked = ctx.scratch->alloc(part.dtype, {int64_t(p) * rows, w});
  tp.all_gather(stacked, part.reshape({rows, w}), ctx.stream);
  if (w == 0) return;
  const size_t es = dtype_size(part.dtype);
  const char* src = static_cast<const char*>(stacked.data);
  char* dst = static_cast<char*>(full.data);
  // Rank r's block (rows, w) goes to columns [r*w, (r+1)*w) of full (rows, p*w).
  for (int r = 0; r < p; ++r)
    copy_rows(ctx, dst + size_t(r * w) * es, size_t(p * w) * es, src + size_t(r * rows * w) * es, size_t(w) * es,
              size_t(w) * es, rows);
}

}  // namespace

void copy_to_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_args(ctx, out, in, "copy_to_tp_forward");
  copy_or_alias(ctx, out, in, "copy_to_tp_forward");
}

void copy_to_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_args(ctx, din, dout, "copy_to_tp_backward");
  copy_or_alias(ctx, din, dout, "copy_to_tp_backward");
  tp.all_reduce(din, ReduceOp::sum, ctx.stream);
}

void reduce_from_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_args(ctx, out, in, "reduce_from_tp_forward");
  copy_or_alias(ctx, out, in, "reduce_from_tp_forward");
  tp.all_reduce(out, ReduceOp::sum, ctx.stream);
}

void reduce_from_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_args(ctx, din, dout, "reduce_from_tp_backward");
  copy_or_alias(ctx, din, dout, "reduce_from_tp_backward");
}

void scatter_to_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_args(ctx, out, in, "scatter_to_tp_forward");
  const int64_t w = check_split(in, out, tp.size(), "scatter_to_tp_forward");
  take_columns(ctx, out, in, tp.rank(), w);
}

void scatter_to_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_args(ctx, din, dout, "scatter_to_tp_backward");
  const int64_t w = check_split(din, dout, tp.size(), "scatter_to_tp_backward");
  gather_columns(ctx, tp, din, dout, w, "scatter_to_tp_backward");
}

void gather_from_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in) {
  check_args(ctx, out, in, "gather_from_tp_forward");
  const int64_t w = check_split(out, in, tp.size(), "gather_from_tp_forward");
  gather_columns(ctx, tp, out, in, w, "gather_from_tp_forward");
}

void gather_from_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout) {
  check_args(ctx, din, dout, "gather_from_tp_backward");
  const int64_t w = check_split(dout, din, tp.size(), "gather_from_tp_backward");
  take_columns(ctx, din, dout, tp.rank(), w);
}

}  // namespace dapo::parallel
