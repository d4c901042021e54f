// CUDA fused decode-step prologue (rope_kv_write, rope.h): RoPE on q and k
// in place and the rotated k plus v into the paged cache, in one launch. The
// rotation is rope.cu's device code (rope_common.cuh: the same host
// inv_freq, angle, sincosf and explicit roundings), so q, k and the cache
// come out with the bits of rope_forward twice then kv_cache_write.
//
// One grid-stride index space in two parts: first the rope threads, per
// token (q head chunks, then k head chunks) x (pair groups of K), exactly
// rope.cu's split, where a k thread also stores its rotated packs at the
// token's cache slot; then the v copy, K elements per thread. A decode step
// of 128 tokens at the 0.5B shape is ~18k threads with K = 2.
#include "common.cuh"
#include "dapo/ops/rope.h"
#include "ptx/pdl.cuh"
#include "attention/rope_common.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

template <int K>
__global__ void rope_kv_write_kernel(bf16_t* q, bf16_t* k, bf16_t* kc, bf16_t* vc, const bf16_t* v,
                                     const int32_t* positions, const int32_t* slots, int64_t tokens, int Hq, int Hkv,
                                     int D, int64_t num_slots, const __grid_constant__ RopeInvFreq inv_freq) {
  pdl_wait();  // launched as a programmatic dependent (pdl.cuh)
  pdl_launch_dependents();
  const int groups = D / 2 / K;
  const int q_chunks = rope_chunks(Hq);
  const int per_token = (q_chunks + rope_chunks(Hkv)) * groups;
  const int64_t rope_total = tokens * per_token;
  const int64_t row = int64_t(Hkv) * D;  // one token's k (or v), one cache slot
  const int64_t v_packs = row / K;
  const int64_t total = rope_total + tokens * v_packs;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    if (idx < rope_total) {
      const int64_t t = idx / per_token;
      const int rest = int(idx - t * per_token);
      const int i0 = (rest % groups) * K;
      const int chunk = rest / groups;
      float c[K], s[K];
      rope_angles<K>(positions[t], inv_freq, i0, 1.0f, c, s);
      if (chunk < q_chunks) {
        const int h0 = chunk * kRopeHeadsInFlight;
        bf16_t* x = q + (t * Hq + h0) * D;
        rope_rotate_heads<bf16_t, K>(x, x, nullptr, min(kRopeHeadsInFlight, Hq - h0), D, i0, c, s);
      } else {
        const int h0 = (chunk - q_chunks) * kRopeHeadsInFlight;
        const int64_t slot = slots[t];
        // -1: skipped by contract; other slots outside the pool: the CPU op diagnoses.
        bf16_t* cache = slot >= 0 && slot < num_slots ? kc + slot * row + int64_t(h0) * D : nullptr;
        bf16_t* x = k + (t * Hkv + h0) * D;
        rope_rotate_heads<bf16_t, K>(x, x, cache, min(kRopeHeadsInFlight, Hkv - h0), D, i0, c, s);
      }
    } else {
      const int64_t j = idx - rope_total;
      const int64_t t = j / v_packs;
      const int64_t e = (j - t * v_packs) * K;
      const int64_t slot = slots[t];
      if (slot >= 0 && slot < num_slots) store_pack(vc + slot * row + e, load_pack<bf16_t, K>(v + t * row + e));
    }
  }
}

template <int K>
void launch(const Ctx& ctx, bf16_t* q, bf16_t* k, bf16_t* kc, bf16_t* vc, const bf16_t* v, const int32_t* positions,
            const int32_t* slots, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t num_slots,
            const RopeInvFreq& inv_freq) {
  const int64_t total = T * (rope_chunks(Hq) + rope_chunks(Hkv)) * (D / 2 / K) + T * (Hkv * D / K);
  DAPO_CUDA_CHECK(launch_pdl(rope_kv_write_kernel<K>, grid_for(total, kRopeThreads), kRopeThreads, 0, stream_of(ctx),
                             q, k, kc, vc, v, positions, slots, T, int(Hq), int(Hkv), int(D), num_slots, inv_freq));
}

}  // namespace

void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta) {
  // The contract (dtypes, shapes, aliasing, theta) is checked by ops::rope_kv_write
  // (or ops::qkv_rope_kv_write); here the kernel's limits.
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k_cache.shape[2];
  DAPO_CHECK(q.dtype == DType::bf16, "rope_kv_write on CUDA: q is ", dtype_name(q.dtype), ", expected bf16");
  DAPO_CHECK(D / 2 <= kRopeMaxHalf, "rope_kv_write on CUDA: head dimension ", D, " above ", 2 * kRopeMaxHalf);
  if (T == 0 || D == 0) return;
  const RopeInvFreq inv_freq = rope_inv_freq(theta, D);
  auto* qp = static_cast<bf16_t*>(q.data);
  auto* kp = static_cast<bf16_t*>(k.data);
  auto* kc = static_cast<bf16_t*>(k_cache.data);
  auto* vc = static_cast<bf16_t*>(v_cache.data);
  const auto* vp = static_cast<const bf16_t*>(v.data);
  const int32_t* pos = positions.ptr<int32_t>();
  const int32_t* slots = slot_mapping.ptr<int32_t>();
  const int64_t num_slots = k_cache.shape[0] * k_cache.shape[1];
  // rope.cu's pack choice over the q and k threads together; a cache slot
  // starts every Hkv * D elements, a multiple of K since K divides D / 2.
  const int64_t wide_threads = T * (rope_chunks(Hq) + rope_chunks(Hkv)) * (D / 2 / kWidePack<bf16_t>);
  switch (rope_pack_width<bf16_t>(wide_threads, D, common_alignment({qp, kp, kc, vc, vp}))) {
    case kWidePack<bf16_t>:
      launch<kWidePack<bf16_t>>(ctx, qp, kp, kc, vc, vp, pos, slots, T, Hq, Hkv, D, num_slots, inv_freq);
      break;
    case 2: launch<2>(ctx, qp, kp, kc, vc, vp, pos, slots, T, Hq, Hkv, D, num_slots, inv_freq); break;
    default: launch<1>(ctx, qp, kp, kc, vc, vp, pos, slots, T, Hq, Hkv, D, num_slots, inv_freq); break;
  }
}

}  // namespace dapo::ops::cuda
