// Token embedding lookup (Qwen2's embed_tokens), vocab-parallel ready in the
// Megatron-LM style: with tensor parallelism each rank holds the rows
// [vocab_start, vocab_start + V_local) of the table; a rank writes the row
// of an id it owns and a zero row for any other id, and the tp ranks'
// partial outputs are summed by an all-reduce elsewhere (reduce_from_tp).
// With tp = 1, vocab_start = 0 and V_local = V.
//
// Dtypes: the CPU backend takes f32 only. On CUDA, embedding_forward takes
// weight and out both bf16 (the production table) or both f32 (it doubles
// as a row gather of hidden states), copied bit for bit; embedding_backward
// takes dout bf16 or f32 and dweight f32, with fp32 sums.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out[i, :] = weight[ids[i] - vocab_start, :] when ids[i] is in
// [vocab_start, vocab_start + V_local), else 0.
// out: (N, C) f32, overwritten.   ids: (N) i32 token ids, >= 0.
// weight: (V_local, C) f32, this rank's shard of the table.
// vocab_start: the first vocabulary id of the shard (>= 0).
// An id < 0 is a fatal check failure on the CPU (never a read outside the
// table); on CUDA it is flagged (device_flags.h: FlagSite::embedding, its row
// and value) and gives a zero row. Ids >= the full vocabulary size cannot be
// told apart from other shards' ids here and give a zero row.
// out must not overlap weight or ids.
void embedding_forward(const Ctx& ctx, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start);

// Scatter-add of the output gradient into the table's gradient:
// dweight[ids[i] - vocab_start, :] += dout[i, :] for every i whose id is in
// this shard; other ids are skipped.
// dweight: (V_local, C) f32, ACCUMULATED (+=).   dout: (N, C) f32.
// ids: (N) i32, >= 0.   vocab_start: as in embedding_forward.
// Repeated ids are summed in the order of i, so the result is bitwise the
// same for any thread count (no atomics, no racy adds). On CUDA the rows of
// one id are summed in order of i (in pieces of up to 64 sorted positions,
// then the pieces in order) and the total added to dweight once: bitwise
// reproducible, though not the CPU's rounding. Negative ids are flagged as
// in embedding_forward and skipped.
void embedding_backward(const Ctx& ctx, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start);

// CUDA backend: dtypes as above. embedding_backward takes about
// 16 N + 8 * ceil(N / 64) * C bytes of ctx.scratch (sort keys and
// rows, and the pieces of runs of one id that cross a chunk of 64).

}  // namespace dapo::ops
