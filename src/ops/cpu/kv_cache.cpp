// CPU reference of the paged KV cache ops (fp32): slot writes, and causal
// GQA attention of new tokens over their sequences' cached blocks. Block
// tables and slot mappings are validated on the host before any memory is
// touched, so a bad table is a clear error, never a wild read.
#include "dapo/ops/kv_cache.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "attention_row.h"
#include "cu_seqlens.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops::cpu {
namespace {

using ops::detail::check_dtype;

}  // namespace

// ops::kv_cache_write checked the contract; the reference copies f32 (k and
// v have the caches' dtype) and checks the slots, which it reads here.
void kv_cache_write(const Ctx&, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v,
                    Tensor slot_mapping) {
  check_dtype("kv_cache_write on the CPU", k_cache, DType::f32, "k_cache");
  const int64_t N = slot_mapping.shape[0], Hkv = k_cache.shape[2], D = k_cache.shape[3];
  const int32_t* slots = slot_mapping.ptr<int32_t>();  // (N)
  const int64_t num_slots = k_cache.shape[0] * k_cache.shape[1];
  for (int64_t i = 0; i < N; ++i)
    DAPO_CHECK(slots[i] >= -1 && slots[i] < num_slots, "kv_cache_write: slot_mapping[", i,
               "] = ", slots[i], " outside [-1, ", num_slots, ")");

  float* kc = k_cache.ptr<float>();  // (num_blocks * block_size, Hkv, D)
  float* vc = v_cache.ptr<float>();  // (num_blocks * block_size, Hkv, D)
  const float* kp = k.ptr<float>();  // (N, Hkv, D)
  const float* vp = v.ptr<float>();  // (N, Hkv, D)
  const int64_t row = Hkv * D;       // one slot = one token's k (or v) of all kv heads
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    if (slots[i] < 0) continue;
    std::memcpy(kc + slots[i] * row, kp + i * row, size_t(row) * sizeof(float));
    std::memcpy(vc + slots[i] * row, vp + i * row, size_t(row) * sizeof(float));
  }
}

void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache,
                     Tensor block_table, Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len,
                     float scale) {
  // ops::paged_attention checked the contract; the reference computes in
  // f32 (q, out and the caches have one dtype) and checks the metadata,
  // which it reads here, before any cache row is touched.
  check_dtype("paged_attention on the CPU", q, DType::f32, "q");
  const int64_t num_blocks = k_cache.shape[0], block_size = k_cache.shape[1];
  const int64_t N = q.shape[0], Hq = q.shape[1], Hkv = k_cache.shape[2], D = k_cache.shape[3];
  const int64_t group = Hq / Hkv;
  const int64_t B = block_table.shape[0], max_blocks = block_table.shape[1];

  const int32_t* bt = block_table.ptr<int32_t>();     // (B, max_blocks)
  const int32_t* lens = context_lens.ptr<int32_t>();  // (B)
  const int32_t* cu = cu_seqlens_q.ptr<int32_t>();    // (B+1)
  detail::check_cu_seqlens("paged_attention", "cu_seqlens_q", cu, B, N, "N");
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t nq = int64_t(cu[b + 1]) - cu[b];
    DAPO_CHECK(nq <= lens[b], "paged_attention: sequence ", b, " has ", nq, " new tokens but context length ",
               lens[b]);
    const int64_t nblocks = (int64_t(lens[b]) + block_size - 1) / block_size;
    DAPO_CHECK(nblocks <= max_blocks, "paged_attention: sequence ", b, " of length ", lens[b],
               " needs ", nblocks, " blocks, block_table has ", max_blocks);
    for (int64_t n = 0; n < nblocks; ++n) {
      const int32_t blk = bt[b * max_blocks + n];
      DAPO_CHECK(blk >= 0 && blk < num_blocks, "paged_attention: block_table[", b, ", ", n,
                 "] = ", blk, " outside [0, ", num_blocks, ")");
    }
    max_len = std::max<int64_t>(max_len, lens[b]);
  }
  DAPO_CHECK(max_len <= max_context_len, "paged_attention: max_context_len = ", max_context_len,
             " but a sequence has context length ", max_len);
  if (N == 0 || Hq == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "paged_attention needs ctx.scratch");

  float* o = out.ptr<float>();            // (N, Hq, D)
  const float* qp = q.ptr<float>();       // (N, Hq, D)
  const float* kc = k_cache.ptr<float>(); // (num_blocks, block_size, Hkv, D)
  const float* vc = v_cache.ptr<float>(); // (num_blocks, block_size, Hkv, D)

  ArenaScope scope(*ctx.scratch);
  const int nthreads = omp_get_max_threads();
  float* scores = ctx.scratch->alloc_array<float>(size_t(nthreads) * size_t(max_len));  // (nthreads, max_len)

  const int64_t rows = N * Hq;
#pragma omp parallel num_threads(nthreads)
  {
    float* s = scores + size_t(omp_get_thread_num()) * size_t(max_len);  // (max_len)
#pragma omp for schedule(dynamic, 4)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r / Hq, h = r % Hq, g = h / group;
      const int64_t b = detail::sequence_of(cu, B, i);
      const int64_t nq = cu[b + 1] - cu[b];
      const int64_t n = lens[b] - nq + (i - cu[b]) + 1;  // keys at positions 0..pos
      const int32_t* table = bt + b * max_blocks;
      // Offset of kv head g of position p inside a cache: one formula for k and v.
      auto slot = [&](int64_t p) {
        return ((int64_t(table[p / block_size]) * block_size + p % block_size) * Hkv + g) * D;
      };
      detail::attend_row(o + (i * Hq + h) * D, qp + (i * Hq + h) * D, n, D, scale, s,
                         [&](int64_t p) { return kc + slot(p); }, [&](int64_t p) { return vc + slot(p); });
    }
  }
}

}  // namespace dapo::ops::cpu
