// Causal grouped-query attention over packed variable-length sequences, for
// training and prefill (the generation engine's decode path is
// paged_attention in kv_cache.h). The CUDA backend runs its own
// FlashAttention-2-style tensor-core kernels (cuda/attention/attention_forward.cu,
// cuda/attention/attention_backward.cu) with the same arguments.
//
// Layout: the tokens of all B sequences are concatenated without padding,
// cu_seqlens (B+1) i32 holds the cumulative offsets (cu_seqlens[0] = 0,
// cu_seqlens[B] = T; an empty sequence is allowed). Sequence b is rows
// [cu_seqlens[b], cu_seqlens[b+1]); attention never crosses a sequence
// boundary and is causal inside a sequence: the query at row i attends to
// the keys at rows cu_seqlens[b]..i.
//
// Heads: q has Hq heads, k and v have Hkv heads, Hq % Hkv == 0, and query
// head h reads kv head h / (Hq / Hkv) (HF's repeat_kv; Hq == Hkv is MHA).
//
// Memory: the CPU reference needs one row of scores per thread (forward)
// and Hq*T floats (backward) from ctx.scratch - O(T) extra memory, never
// O(T^2) - so sequences of many thousand tokens are fine.
//
// CUDA backend: q, k, v, out, dout, dq, dk, dv bf16, lse f32, cu_seqlens i32,
// all on the device; head dim D = 16, 32, 64 or 128 (tiles tuned for 64 and
// 128; 16 and 32 serve small test and demo models); bf16 tensors 16-byte aligned.
// Products on tensor cores (bf16 in, fp32 accumulate), softmax statistics,
// lse and the backward's rowsum(dout * out) in fp32; P and dS are rounded to
// bf16 for their products, as in FlashAttention-2. cu_seqlens is never read
// on the host: the kernels build their work list on the device (max_seqlen
// is not needed there). A malformed cu_seqlens is not diagnosed on CUDA (the
// CPU op checks it); sequences outside [0, T] are skipped, their rows left
// unwritten. The backward is deterministic (bit-identical on repeated runs):
// no atomics, every output element summed by one CTA in a fixed order.
// Scratch from ctx.scratch: forward at most (T/64 + B) * 8 bytes; backward
// 8 * Hq * T + (T/128 + B) * 8 + (T/64 + B) * 8 bytes.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// out:        (T, Hq, D) f32 (CPU) / bf16 (CUDA), overwritten: softmax(scale * q k^T + causal mask) v.
// lse:        (Hq, T) f32, overwritten: log(sum_j exp(scale * q_i . k_j)) over
//             the keys each query sees (natural log, scaled scores, same
//             layout as flash-attention's varlen softmax_lse). Kept for backward.
// q:          (T, Hq, D) f32.   k, v: (T, Hkv, D) f32.   (bf16 on CUDA)
// cu_seqlens: (B+1) i32 cumulative sequence offsets (see above), on the
//             backend's device.
// max_seqlen: >= the longest sequence, max_b(cu_seqlens[b+1] - cu_seqlens[b]),
//             given by the caller (who packed the batch on the host) so that a
//             GPU launch never reads cu_seqlens back; the CPU op checks it.
// scale:      multiplies q . k; usually 1 / sqrt(D); finite.
// k, v and out have q's dtype. out and lse overlap no other argument.
// Needs ctx.scratch (CPU: nthreads * max_seqlen floats).
void attention_forward(const Ctx& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                       Tensor cu_seqlens, int64_t max_seqlen, float scale);

// Gradients of attention_forward, flash-attention style: probabilities are
// recomputed from q, k and lse (nothing of size T^2 was saved).
// dq:   (T, Hq, D) f32 (CUDA: bf16), OVERWRITTEN.
// dk:   (T, Hkv, D) f32 (CUDA: bf16), OVERWRITTEN (summed over the query heads of each group).
// dv:   (T, Hkv, D) f32 (CUDA: bf16), OVERWRITTEN (summed over the query heads of each group).
// dout: (T, Hq, D) f32 (CUDA: bf16), the gradient of out.
// q, k, v, cu_seqlens, max_seqlen, scale: as given to attention_forward;
// out:  (T, Hq, D) and lse: (Hq, T), what attention_forward returned.
// All but lse have q's dtype. dq, dk and dv overlap no other argument.
// Deterministic: the result does not depend on the number of threads
// (CPU) and is bit-identical on repeated runs (CUDA).
// Needs ctx.scratch (CPU: Hq * T floats).
void attention_backward(const Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                        Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens, int64_t max_seqlen,
                        float scale);

// CUDA backend: the dtypes above (bf16, lse f32), D in {16, 32, 64, 128}.

}  // namespace dapo::ops
