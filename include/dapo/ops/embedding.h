// Token embedding lookup (Qwen2's embed_tokens), vocab-parallel ready in the
// Megatron-LM style: with tensor parallelism each rank holds the rows
// [vocab_start, vocab_start + V_local) of the table; a rank writes the row
// of an id it owns and a zero row for any other id, and the tp ranks'
// partial outputs are summed by an all-reduce elsewhere (reduce_from_tp).
// With tp = 1, vocab_start = 0 and V_local = V.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out[i, :] = weight[ids[i] - vocab_start, :] when ids[i] is in
// [vocab_start, vocab_start + V_local), else 0.
// out: (N, C) f32, overwritten.   ids: (N) i32 token ids, >= 0.
// weight: (V_local, C) f32, this rank's shard of the table.
// vocab_start: the first vocabulary id of the shard (>= 0).
// An id < 0 is a fatal check failure (never a read outside the table); ids
// >= the full vocabulary size cannot be told apart from other shards' ids
// here and give a zero row.
void embedding_forward(const Ctx& ctx, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start);

// Scatter-add of the output gradient into the table's gradient:
// dweight[ids[i] - vocab_start, :] += dout[i, :] for every i whose id is in
// this shard; other ids are skipped.
// dweight: (V_local, C) f32, ACCUMULATED (+=).   dout: (N, C) f32.
// ids: (N) i32, >= 0.   vocab_start: as in embedding_forward.
// Repeated ids are summed in the order of i, so the result is bitwise the
// same for any thread count (no atomics, no racy adds).
void embedding_backward(const Ctx& ctx, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start);

namespace cpu {
void embedding_forward(const Ctx& ctx, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start);
void embedding_backward(const Ctx& ctx, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start);
}  // namespace cpu

}  // namespace dapo::ops
