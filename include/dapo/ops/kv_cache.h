// The generation engine's paged KV cache (vLLM style) and the attention
// that reads it. The cache is a pool of fixed-size blocks; each sequence
// owns a block table listing the physical blocks that hold its positions,
// in order. Block tables may point at the same physical blocks: the n
// samples of one prompt share the prompt's blocks (prefilled once), so
// nothing here assumes a private cache per sequence. Which blocks are free,
// and their reference counts, is the engine's business, not the ops'.
//
// Cache layout, per layer: k_cache, v_cache (num_blocks, block_size, Hkv, D)
// f32 (CUDA: bf16). Logical position p of sequence b lives in physical block
// block_table[b, p / block_size] at offset p % block_size, i.e. at the flat
// slot block_table[b, p / block_size] * block_size + p % block_size.
#pragma once

#include "dapo/ops/context.h"
#include "dapo/ops/plan/paged_attention_plan.h"

namespace dapo::ops {

// Writes the k/v of N new tokens into their cache slots.
// k_cache, v_cache: (num_blocks, block_size, Hkv, D) f32, updated in place
//                   (only the addressed slots are written).
// k, v:             (N, Hkv, D) f32, the new tokens' keys (after RoPE) and values.
// slot_mapping:     (N) i32, token i goes to flat slot slot_mapping[i] =
//                   block * block_size + offset; -1 skips the token.
// Two tokens must not name the same slot (the CUDA kernel writes in parallel).
// k and v have the caches' dtype; the two caches overlap neither each other
// nor k, v or slot_mapping.
void kv_cache_write(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v,
                    Tensor slot_mapping);

// Causal GQA attention of new query tokens against the paged cache; one op
// for prefill (all tokens new), chunked prefill (some) and decode (one new
// token per sequence).
// out:           (N, Hq, D) f32, overwritten.
// q:             (N, Hq, D) f32, the new tokens' queries (after RoPE), packed
//                over the B sequences by cu_seqlens_q.
// k_cache, v_cache: (num_blocks, block_size, Hkv, D) f32; the new tokens' k/v
//                must already be written (kv_cache_write).
// block_table:   (B, max_blocks) i32, physical block ids; entries past a
//                sequence's ceil(context_len / block_size) blocks are ignored.
// context_lens:  (B) i32, the number of cached positions of each sequence,
//                new tokens included.
// cu_seqlens_q:  (B+1) i32, the new tokens of sequence b are rows
//                cu_seqlens_q[b]..cu_seqlens_q[b+1]-1 and are the LAST
//                (cu_seqlens_q[b+1] - cu_seqlens_q[b]) positions of its context;
//                the one at position p attends to positions 0..p.
// scale:         multiplies q . k; usually 1 / sqrt(D); finite.
// Hq % Hkv == 0; query head h reads kv head h / (Hq / Hkv). out and the
// caches have q's dtype; out overlaps no other argument.
// max_context_len: >= every context_lens[b], given by the caller (who built
//                the batch on the host) so that a GPU launch never reads
//                context_lens back; the CPU op checks it.
// Needs ctx.scratch (CPU: nthreads * max(context_lens) floats; CUDA: at most
// 64 MiB of split-KV partials, see cuda::paged_attention_scratch_bytes).
void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache,
                     Tensor block_table, Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len,
                     float scale);

// CUDA backend: k_cache, v_cache, k, v, q, out bf16; slot_mapping,
// block_table, context_lens, cu_seqlens_q i32; all on the device.
// paged_attention: D in {16, 32, 64, 128}; q, out and the caches 16-byte
// aligned; num_blocks * block_size < 2^31. q.K and P.V run on the tensor
// cores with bf16 operands (P, the softmax weights in [0, 1], rounded to bf16
// as FlashAttention does); the softmax statistics and every sum are fp32.
// kv_cache_write copies 16 bytes at a time where rows and pointers allow (any
// shape works). The metadata is not read on the host and a malformed one is
// not diagnosed (the CPU op checks it): kv_cache_write skips slots outside
// [0, num_blocks * block_size); paged_attention skips sequences whose
// lengths contradict max_context_len, the table width or cu_seqlens_q (their
// rows left unwritten) and reads a block id outside [0, num_blocks) as masked
// keys (a row with every key masked comes out 0). Decode-first design: one
// CTA reads a stretch of a sequence's cache once for all query heads of a
// KV group; longer contexts are split over CTAs (split-KV): the CTAs of a
// merge group are one thread-block cluster that combines their partial
// softmax states through distributed shared memory, and several merge
// groups are combined by a second kernel from fp32 partials in ctx.scratch,
// each in a fixed order, so results are bit-identical on repeated runs with
// the same shapes on the same device. The split depends only on the shapes,
// max_context_len and the device (its SM count), never on device data, so a
// fixed-shape call can be captured in a CUDA graph; it takes
// paged_attention_scratch_bytes(...) of ctx.scratch (at most 64 MiB plus
// 768 bytes of alignment; 0 with one merge group), computed for the current
// device. The kernel is launched as a programmatic dependent of the previous
// kernel on the stream: it reads block_table, context_lens and cu_seqlens_q
// while that kernel may still run (they must be on the device before that
// kernel starts, as the engine's step metadata copy is), and q and the caches
// only once it has finished.
// Under ctx.batch_invariant (rollout.exact_logprobs) the CUDA op instead
// runs attention_forward's kernel through the block table
// (cuda/attention/attention_paged_exact.h): each row gets the bits of the
// packed attention_forward over its sequence; no split over the keys, no
// programmatic launch.

}  // namespace dapo::ops
