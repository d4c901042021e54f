// CUDA paged KV cache slot writes (kv_cache_write); the attention that reads
// the cache is cuda/attention/paged_attention.cu.
#include <algorithm>

#include "common.cuh"
#include "dapo/ops/kv_cache.h"
#include "ptx/pack.cuh"

namespace dapo::ops::cuda {
namespace {

using namespace cuda_detail;
using bf16_t = __nv_bfloat16;

// ---- kv_cache_write ----------------------------------------------------

// One CTA per token (grid-stride): the token's k row then its v row, K
// elements per access.
template <int K>
__global__ void kv_cache_write_kernel(bf16_t* kc, bf16_t* vc, const bf16_t* k, const bf16_t* v, const int32_t* slots,
                                      int64_t N, int64_t row, int64_t num_slots) {
  const int64_t packs = row / K;
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int64_t s = slots[i];
    if (s < 0 || s >= num_slots) continue;  // -1: skipped by contract; others: the CPU op diagnoses
    for (int64_t j = threadIdx.x; j < 2 * packs; j += blockDim.x) {
      const bool is_v = j >= packs;
      const int64_t e = (is_v ? j - packs : j) * K;
      store_pack((is_v ? vc : kc) + s * row + e, load_pack<bf16_t, K>((is_v ? v : k) + i * row + e));
    }
  }
}

void check_cache(const Ctx& ctx, const char* op, const Tensor& k_cache, const Tensor& v_cache) {
  DAPO_CHECK_DTYPE(k_cache, DType::bf16);
  DAPO_CHECK_DTYPE(v_cache, DType::bf16);
  DAPO_CHECK(k_cache.ndim == 4, op, ": k_cache ", k_cache.shape_string(), " must be (num_blocks, block_size, Hkv, D)");
  DAPO_CHECK(v_cache.same_shape(k_cache), op, ": v_cache ", v_cache.shape_string(), " vs k_cache ",
             k_cache.shape_string());
  DAPO_CHECK(k_cache.shape[1] > 0 && k_cache.shape[2] > 0, op, ": empty cache geometry ", k_cache.shape_string());
  check_device(ctx, k_cache, "k_cache");
  check_device(ctx, v_cache, "v_cache");
}

}  // namespace

void kv_cache_write(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor slot_mapping) {
  check_cache(ctx, "kv_cache_write", k_cache, v_cache);
  DAPO_CHECK_DTYPE(k, DType::bf16);
  DAPO_CHECK_DTYPE(v, DType::bf16);
  DAPO_CHECK_DTYPE(slot_mapping, DType::i32);
  DAPO_CHECK(slot_mapping.ndim == 1, "kv_cache_write: slot_mapping ", slot_mapping.shape_string(), " must be (N)");
  const int64_t N = slot_mapping.shape[0], Hkv = k_cache.shape[2], D = k_cache.shape[3];
  DAPO_CHECK_SHAPE(k, {N, Hkv, D});
  DAPO_CHECK_SHAPE(v, {N, Hkv, D});
  check_device(ctx, k, "k");
  check_device(ctx, v, "v");
  check_device(ctx, slot_mapping, "slot_mapping");
  const int64_t row = Hkv * D, num_slots = k_cache.shape[0] * k_cache.shape[1];
  if (N == 0 || row == 0) return;
  const unsigned grid = unsigned(std::min<int64_t>(N, int64_t(65535) * 32));
  auto* kc = static_cast<bf16_t*>(k_cache.data);
  auto* vc = static_cast<bf16_t*>(v_cache.data);
  const auto* kp = static_cast<const bf16_t*>(k.data);
  const auto* vp = static_cast<const bf16_t*>(v.data);
  const int threads = row >= 512 ? 128 : 64;
  if (row % 8 == 0 && aligned16(kc) && aligned16(vc) && aligned16(kp) && aligned16(vp))
    kv_cache_write_kernel<8><<<grid, threads, 0, stream_of(ctx)>>>(kc, vc, kp, vp, slot_mapping.ptr<int32_t>(), N, row,
                                                                   num_slots);
  else
    kv_cache_write_kernel<1><<<grid, threads, 0, stream_of(ctx)>>>(kc, vc, kp, vp, slot_mapping.ptr<int32_t>(), N, row,
                                                                   num_slots);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda
