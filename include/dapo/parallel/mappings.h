// Megatron-LM's tensor-parallel mappings (tensor_parallel/mappings.py): the
// communication at the edges of column- and row-parallel layers, each as a
// forward and the backward it implies. All run on the tp Comm; tp = 1 makes
// every one a copy. Splits and gathers are along the LAST dimension:
// C is the full size, C/tp the slice of tp rank r, columns [r*C/tp, (r+1)*C/tp).
//
//   copy_to_tp      fwd: identity          bwd: all-reduce sum over tp
//   reduce_from_tp  fwd: all-reduce sum    bwd: identity
//   scatter_to_tp   fwd: keep own slice    bwd: all-gather along last dim
//   gather_from_tp  fwd: all-gather last   bwd: keep own slice
//
// Tensors are views of any dtype of Comm (f32, bf16, i32, i64; bf16 sums
// round as described in comm.h) on the Ctx's device: host tensors go
// through MPI, device tensors through NCCL, with every copy and collective
// enqueued on ctx.stream (nothing waits for the host). out and in share
// dtype and all dims but the last. Outputs are OVERWRITTEN. Where the
// shapes are equal, out may be in itself (in place); other overlaps are
// errors. The last-dim gathers need a temporary of out's size from
// ctx.scratch (released before returning; on the GPU the stream order keeps
// it alive long enough, as for any scratch).
#pragma once

#include "dapo/ops/context.h"
#include "dapo/parallel/comm.h"

namespace dapo::parallel {

// out, in: (..., C), out may be in.
void copy_to_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in);
// din, dout: (..., C), din may be dout. din = sum over tp ranks of dout.
void copy_to_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout);

// out, in: (..., C), out may be in. out = sum over tp ranks of in.
void reduce_from_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in);
// din, dout: (..., C), din may be dout.
void reduce_from_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout);

// out (..., C/tp), in (..., C): this rank's columns of in.
void scatter_to_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in);
// din (..., C), dout (..., C/tp): din = every rank's dout side by side. Uses ctx.scratch.
void scatter_to_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout);

// out (..., C), in (..., C/tp): out = every rank's in side by side. Uses ctx.scratch.
void gather_from_tp_forward(const ops::Ctx& ctx, const Comm& tp, Tensor out, Tensor in);
// din (..., C/tp), dout (..., C): this rank's columns of dout.
void gather_from_tp_backward(const ops::Ctx& ctx, const Comm& tp, Tensor din, Tensor dout);

}  // namespace dapo::parallel
