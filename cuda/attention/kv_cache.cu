// CUDA paged KV cache slot writes (kv_cache_write); the attention that reads
// the cache is cuda/attention/paged_attention.cu.
#include <algorithm>

#include "common.cuh"
#include "dapo/ops/kv_cache.h"
#include "ptx/pack.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

// ---- kv_cache_write ----------------------------------------------------

// Threads of a token's CTA, which stride over its k and v rows: the wider
// CTA for rows (Hkv * D) of kWriteWideRow elements or more.
constexpr int kWriteThreadsNarrow = 64;
constexpr int kWriteThreadsWide = 128;
constexpr int64_t kWriteWideRow = 512;

// One CTA per token (grid-stride): the token's k row then its v row, K
// elements per access.
template <int K>
__global__ void kv_cache_write_kernel(bf16_t* kc, bf16_t* vc, const bf16_t* k, const bf16_t* v, const int32_t* slots,
                                      int64_t N, int64_t row, int64_t num_slots, DeviceFlags* flags) {
  const int64_t packs = row / K;
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int64_t s = slots[i];
    if (s < 0 || s >= num_slots) {  // -1: skipped by contract; others are bad metadata, flagged
      if (s != -1 && threadIdx.x == 0) flag_bad_id(flags, FlagSite::kv_slot, i, s);
      continue;
    }
    for (int64_t j = threadIdx.x; j < 2 * packs; j += blockDim.x) {
      const bool is_v = j >= packs;
      const int64_t e = (is_v ? j - packs : j) * K;
      store_pack((is_v ? vc : kc) + s * row + e, load_pack<bf16_t, K>((is_v ? v : k) + i * row + e));
    }
  }
}

}  // namespace

// The contract (shapes, dtypes, aliasing) is checked by ops::kv_cache_write;
// the kernel copies bf16 (k and v have the caches' dtype).
void kv_cache_write(const Ctx& ctx, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor slot_mapping) {
  DAPO_CHECK(k_cache.dtype == DType::bf16, "kv_cache_write on CUDA: k_cache is ", dtype_name(k_cache.dtype),
             ", expected bf16");
  const int64_t N = slot_mapping.shape[0], Hkv = k_cache.shape[2], D = k_cache.shape[3];
  const int64_t row = Hkv * D, num_slots = k_cache.shape[0] * k_cache.shape[1];
  if (N == 0 || row == 0) return;
  const unsigned grid = unsigned(std::min<int64_t>(N, int64_t(65535) * 32));
  auto* kc = static_cast<bf16_t*>(k_cache.data);
  auto* vc = static_cast<bf16_t*>(v_cache.data);
  const auto* kp = static_cast<const bf16_t*>(k.data);
  const auto* vp = static_cast<const bf16_t*>(v.data);
  const int threads = row >= kWriteWideRow ? kWriteThreadsWide : kWriteThreadsNarrow;
  if (row % 8 == 0 && aligned16(kc) && aligned16(vc) && aligned16(kp) && aligned16(vp))
    kv_cache_write_kernel<8><<<grid, threads, 0, stream_of(ctx)>>>(kc, vc, kp, vp, slot_mapping.ptr<int32_t>(), N, row,
                                                                   num_slots, ctx.flags);
  else
    kv_cache_write_kernel<1><<<grid, threads, 0, stream_of(ctx)>>>(kc, vc, kp, vp, slot_mapping.ptr<int32_t>(), N, row,
                                                                   num_slots, ctx.flags);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda
