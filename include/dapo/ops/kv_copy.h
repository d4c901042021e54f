// Whole-block copies inside the paged KV cache (ops/kv_cache.h layout): the
// copy-on-write of the generation engine. The n samples of a prompt share
// the prompt's blocks; the first sample to write into a shared, partially
// filled block gets a private copy of it first, made by this op.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// For every j: block dst_blocks[j] of k_cache and of v_cache becomes a copy
// of block src_blocks[j] (all block_size slots, all heads).
// k_cache, v_cache: (num_blocks, block_size, Hkv, D) f32 (CUDA: bf16), updated in place
//                   (only the dst blocks are written).
// src_blocks, dst_blocks: (M) i32 physical block ids in [0, num_blocks);
//                   M may be 0. The dst ids must be distinct and none may be
//                   a src id, so the copies do not depend on their order
//                   (the CUDA kernel runs them in parallel).
// The two caches share dtype and shape and overlap neither each other nor
// the id lists.
void kv_block_copy(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor src_blocks, Tensor dst_blocks);

// CUDA backend: k_cache, v_cache bf16 (f32 also works), src_blocks,
// dst_blocks i32, all on the device; 16-byte copies where the block size in
// bytes and the pointers allow. The ids are not read on the host and not
// diagnosed (the CPU op checks them): a copy naming a block outside
// [0, num_blocks) is skipped.

}  // namespace dapo::ops
