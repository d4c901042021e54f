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

namespace dapo::ops::cpu {
namespace {

struct CacheDims {
  int64_t num_blocks, block_size, Hkv, D;
};

CacheDims check_cache(const char* op, const Tensor& k_cache, const Tensor& v_cache) {
  DAPO_CHECK_DTYPE(k_cache, DType::f32);
  DAPO_CHECK_DTYPE(v_cache, DType::f32);
  DAPO_CHECK(k_cache.ndim == 4, op, ": k_cache ", k_cache.shape_string(),
             " must be (num_blocks, block_size, Hkv, D)");
  const CacheDims c{k_cache.shape[0], k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]};
  DAPO_CHECK_SHAPE(v_cache, {c.num_blocks, c.block_size, c.Hkv, c.D});
  DAPO_CHECK(c.block_size > 0 && c.Hkv > 0, op, ": empty cache geometry ",
             k_cache.shape_string());
  return c;
}

}  // namespace

void kv_cache_write(const Ctx&, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v,
                    Tensor slot_mapping) {
  const CacheDims c = check_cache("kv_cache_write", k_cache, v_cache);
  DAPO_CHECK_DTYPE(k, DType::f32);
  DAPO_CHECK_DTYPE(v, DType::f32);
  DAPO_CHECK_DTYPE(slot_mapping, DType::i32);
  DAPO_CHECK(slot_mapping.ndim == 1, "kv_cache_write: slot_mapping ",
             slot_mapping.shape_string(), " must be (N)");
  const int64_t N = slot_mapping.shape[0];
  DAPO_CHECK_SHAPE(k, {N, c.Hkv, c.D});
  DAPO_CHECK_SHAPE(v, {N, c.Hkv, c.D});
  const int32_t* slots = slot_mapping.ptr<int32_t>();  // (N)
  const int64_t num_slots = c.num_blocks * c.block_size;
  for (int64_t i = 0; i < N; ++i)
    DAPO_CHECK(slots[i] >= -1 && slots[i] < num_slots, "kv_cache_write: slot_mapping[", i,
               "] = ", slots[i], " outside [-1, ", num_slots, ")");

  float* kc = k_cache.ptr<float>();  // (num_blocks * block_size, Hkv, D)
  float* vc = v_cache.ptr<float>();  // (num_blocks * block_size, Hkv, D)
  const float* kp = k.ptr<float>();  // (N, Hkv, D)
  const float* vp = v.ptr<float>();  // (N, Hkv, D)
  const int64_t row = c.Hkv * c.D;   // one slot = one token's k (or v) of all kv heads
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
  const CacheDims c = check_cache("paged_attention", k_cache, v_cache);
  DAPO_CHECK_DTYPE(out, DType::f32);
  DAPO_CHECK_DTYPE(q, DType::f32);
  DAPO_CHECK_DTYPE(block_table, DType::i32);
  DAPO_CHECK_DTYPE(context_lens, DType::i32);
  DAPO_CHECK_DTYPE(cu_seqlens_q, DType::i32);
  DAPO_CHECK(q.ndim == 3, "paged_attention: q ", q.shape_string(), " must be (N, Hq, D)");
  const int64_t N = q.shape[0], Hq = q.shape[1], D = c.D, Hkv = c.Hkv;
  DAPO_CHECK(q.shape[2] == D, "paged_attention: q ", q.shape_string(), " vs cache head dim ", D);
  DAPO_CHECK(Hq % Hkv == 0, "paged_attention: Hq = ", Hq, " is not a multiple of Hkv = ", Hkv);
  const int64_t group = Hq / Hkv;
  DAPO_CHECK_SHAPE(out, {N, Hq, D});
  DAPO_CHECK(block_table.ndim == 2, "paged_attention: block_table ", block_table.shape_string(),
             " must be (B, max_blocks)");
  const int64_t B = block_table.shape[0], max_blocks = block_table.shape[1];
  DAPO_CHECK_SHAPE(context_lens, {B});
  DAPO_CHECK_SHAPE(cu_seqlens_q, {B + 1});

  const int32_t* bt = block_table.ptr<int32_t>();     // (B, max_blocks)
  const int32_t* lens = context_lens.ptr<int32_t>();  // (B)
  const int32_t* cu = cu_seqlens_q.ptr<int32_t>();    // (B+1)
  detail::check_cu_seqlens("paged_attention", "cu_seqlens_q", cu, B, N, "N");
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t nq = int64_t(cu[b + 1]) - cu[b];
    DAPO_CHECK(nq <= lens[b], "paged_attention: sequence ", b, " has ", nq, " new tokens but context length ",
               lens[b]);
    const int64_t nblocks = (int64_t(lens[b]) + c.block_size - 1) / c.block_size;
    DAPO_CHECK(nblocks <= max_blocks, "paged_attention: sequence ", b, " of length ", lens[b],
               " needs ", nblocks, " blocks, block_table has ", max_blocks);
    for (int64_t n = 0; n < nblocks; ++n) {
      const int32_t blk = bt[b * max_blocks + n];
      DAPO_CHECK(blk >= 0 && blk < c.num_blocks, "paged_attention: block_table[", b, ", ", n,
                 "] = ", blk, " outside [0, ", c.num_blocks, ")");
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
        return ((int64_t(table[p / c.block_size]) * c.block_size + p % c.block_size) * Hkv + g) * D;
      };
      detail::attend_row(o + (i * Hq + h) * D, qp + (i * Hq + h) * D, n, D, scale, s,
                         [&](int64_t p) { return kc + slot(p); }, [&](int64_t p) { return vc + slot(p); });
    }
  }
}

}  // namespace dapo::ops::cpu
