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
//
// With Qwen3's head norm (rope.h's HeadNorm) a thread no longer sees whole
// heads, so the norm has a kernel of its own: one warp per (token, head),
// q heads and k heads alike, lane t holding 16-byte pack t of the head. That
// is rmsnorm_forward's CTA for a bf16 row of D <= 256 (norm/rmsnorm_kernels.cuh
// forward_kernel: 32 threads, one pack each), whose reduction it repeats
// step for step, so the normed values have the norm's bits; the rotation
// then pairs lane t with lane t + D / 16 through shuffles. Other shapes norm
// with rmsnorm_forward itself before the kernel above.
#include "common.cuh"
#include "dapo/ops/rope.h"
#include "ptx/pdl.cuh"
#include "attention/rope_common.cuh"
#include "norm/rmsnorm_kernels.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using bf16_t = __nv_bfloat16;

template <int K>
__global__ void rope_kv_write_kernel(bf16_t* q, bf16_t* k, bf16_t* kc, bf16_t* vc, const bf16_t* v,
                                     const int32_t* positions, const int32_t* slots, int64_t tokens, int Hq, int Hkv,
                                     int D, int64_t num_slots, const __grid_constant__ RopeInvFreq inv_freq,
                                     DeviceFlags* flags) {
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
        // Outside the pool: not written (flagged by the v copy).
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
      // -1: skipped by contract; other slots outside the pool: bad metadata,
      // flagged once per token (by its first v pack).
      else if (slot != -1 && e == 0) flag_bad_id(flags, FlagSite::kv_slot, t, slot);
    }
  }
}

template <int K>
void launch(const Ctx& ctx, bf16_t* q, bf16_t* k, bf16_t* kc, bf16_t* vc, const bf16_t* v, const int32_t* positions,
            const int32_t* slots, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t num_slots,
            const RopeInvFreq& inv_freq) {
  const int64_t total = T * (rope_chunks(Hq) + rope_chunks(Hkv)) * (D / 2 / K) + T * (Hkv * D / K);
  DAPO_CUDA_CHECK(launch_pdl(rope_kv_write_kernel<K>, grid_for(total, kRopeThreads), kRopeThreads, 0, stream_of(ctx),
                             q, k, kc, vc, v, positions, slots, T, int(Hq), int(Hkv), int(D), num_slots, inv_freq,
                             ctx.flags));
}

// ---- with the head norm ----

constexpr int kNormPack = kWidePack<bf16_t>;  // 8 elements a lane
constexpr int kNormMaxD = 32 * kNormPack;     // a head is at most one pack per lane
constexpr int kNormThreads = 256;             // 8 (token, head) warps a CTA

// Lane `src`'s pack, for every lane of the warp (all 32 must call it).
__device__ __forceinline__ Pack<bf16_t, kNormPack> shfl_pack(const Pack<bf16_t, kNormPack>& p, int src) {
  static_assert(sizeof(Pack<bf16_t, kNormPack>) == sizeof(uint4));
  const uint4 u = *reinterpret_cast<const uint4*>(&p);
  uint4 r;
  r.x = __shfl_sync(0xffffffffu, u.x, src);
  r.y = __shfl_sync(0xffffffffu, u.y, src);
  r.z = __shfl_sync(0xffffffffu, u.z, src);
  r.w = __shfl_sync(0xffffffffu, u.w, src);
  return *reinterpret_cast<const Pack<bf16_t, kNormPack>*>(&r);
}

// Warp w of the grid takes items w, w + warps, ... of T * (Hq + Hkv): token
// item / (Hq + Hkv), then its q heads and its k heads. The warp of a k head
// also copies the token's v head to the cache slot. Lanes past D / 8 hold
// nothing but take part in the shuffles.
__global__ void __launch_bounds__(kNormThreads)
    norm_rope_kv_write_kernel(bf16_t* q, bf16_t* k, bf16_t* kc, bf16_t* vc, const bf16_t* v, const bf16_t* q_weight,
                              const bf16_t* k_weight, const int32_t* positions, const int32_t* slots, int64_t tokens,
                              int Hq, int Hkv, int D, int64_t num_slots, float eps,
                              const __grid_constant__ RopeInvFreq inv_freq, DeviceFlags* flags) {
  constexpr int K = kNormPack;
  pdl_wait();  // launched as a programmatic dependent (pdl.cuh); the weights too may be new
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int packs = D / K, half = packs / 2;
  const bool holds = lane < packs;
  // Lane t < half holds x1 of pairs [t * K, t * K + K), lane t + half their x2.
  const bool first = lane < half;
  const int partner = first ? lane + half : lane - half;
  const int i0 = (first ? lane : lane - half) * K;
  Pack<bf16_t, K> wq{}, wk{};
  if (holds) {
    wq = load_pack<bf16_t, K>(q_weight + lane * K);
    wk = load_pack<bf16_t, K>(k_weight + lane * K);
  }
  const int heads = Hq + Hkv;
  const int64_t items = tokens * heads;
  const int64_t row = int64_t(Hkv) * D;  // one token's k (or v), one cache slot
  const int warps_per_cta = blockDim.x / 32;
  const int64_t warps = int64_t(gridDim.x) * warps_per_cta;
  for (int64_t item = int64_t(blockIdx.x) * warps_per_cta + threadIdx.x / 32; item < items; item += warps) {
    const int64_t t = item / heads;
    const int h = int(item - t * heads);
    const bool is_k = h >= Hq;
    const int hk = h - Hq;  // the k head, when is_k
    bf16_t* x = (is_k ? k + (t * Hkv + hk) * D : q + (t * Hq + h) * D) + lane * K;
    Pack<bf16_t, K> xp{};
    float ss = 0.0f;
    if (holds) {
      xp = load_pack<bf16_t, K>(x);
      // forward_kernel's arithmetic: the pack's squares in order, ...
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const float f = widen(xp.v[j]);
        ss += f * f;
      }
    }
    // ... warp_sum's butterfly, and block_sum of its one warp: 0 + lane 0's
    // sum, which is that sum (>= +0).
    ss = __shfl_sync(0xffffffffu, norm::warp_sum(ss), 0);
    const float rs = 1.0f / sqrtf(ss / float(D) + eps);
    Pack<bf16_t, K> y;
#pragma unroll
    for (int j = 0; j < K; ++j) y.v[j] = narrow<bf16_t>((widen(xp.v[j]) * rs) * widen(is_k ? wk.v[j] : wq.v[j]));
    const Pack<bf16_t, K> other = shfl_pack(y, partner);
    if (!holds) continue;
    // rope_rotate_heads' arithmetic on the normed (rounded) values.
    float c[K], s[K];
    rope_angles<K>(positions[t], inv_freq, i0, 1.0f, c, s);
    Pack<bf16_t, K> r;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const float a = widen(first ? y.v[j] : other.v[j]), b = widen(first ? other.v[j] : y.v[j]);
      r.v[j] = first ? narrow<bf16_t>(__fadd_rn(__fmul_rn(a, c[j]), __fmul_rn(-b, s[j])))
                     : narrow<bf16_t>(__fadd_rn(__fmul_rn(b, c[j]), __fmul_rn(a, s[j])));
    }
    store_pack(x, r);
    if (is_k) {
      const int64_t slot = slots[t];
      // -1: skipped by contract; other slots outside the pool: bad metadata,
      // flagged once per token (by lane 0 of its first k head).
      if (slot >= 0 && slot < num_slots) {
        const int64_t at = slot * row + int64_t(hk) * D + lane * K;
        store_pack(kc + at, r);
        store_pack(vc + at, load_pack<bf16_t, K>(v + (t * Hkv + hk) * D + lane * K));
      } else if (slot != -1 && hk == 0 && lane == 0) {
        flag_bad_id(flags, FlagSite::kv_slot, t, slot);
      }
    }
  }
}

// x (T, H, D) normed in place by rmsnorm_forward on its T * H head rows. In
// place holds for its kernels (norm/rmsnorm_kernels.cuh): a row's elements
// are each read and then written by one thread, and every read of the row
// precedes the reduction's barrier; the op's contract forbids it only to
// leave room to other kernels.
void norm_heads(const Ctx& ctx, Tensor x, Tensor weight, float eps) {
  DAPO_CHECK(ctx.scratch != nullptr, "rope_kv_write on CUDA: the head norm needs ctx.scratch");
  const int64_t rows = x.shape[0] * x.shape[1], D = x.shape[2];
  ArenaScope scope(*ctx.scratch);
  const Tensor rstd = ctx.scratch->alloc(DType::f32, {rows});
  const Tensor heads = x.reshape({rows, D});
  cuda::rmsnorm_forward(ctx, heads, rstd, heads, weight, eps);
}

}  // namespace

bool detail::rope_kv_write_head_norm_fused(const Tensor& q, const Tensor& k, const Tensor& k_cache,
                                           const Tensor& v_cache, const Tensor& v, const HeadNorm& hn) {
  const int64_t D = q.shape[2];
  // Pairs (i, i + D / 2) in whole packs; rmsnorm_forward's 32-thread CTA of
  // one pack each only up to 256; its pack path only where all is aligned.
  return q.dtype == DType::bf16 && D % (2 * kNormPack) == 0 && D <= kNormMaxD &&
         common_alignment({q.data, k.data, k_cache.data, v_cache.data, v.data, hn.q_weight.data,
                           hn.k_weight.data}) % 16 == 0;
}

void rope_kv_write(const Ctx& ctx, Tensor q, Tensor k, Tensor k_cache, Tensor v_cache, Tensor v, Tensor positions,
                   Tensor slot_mapping, float theta, const HeadNorm& hn) {
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
  if (hn.active()) {
    if (detail::rope_kv_write_head_norm_fused(q, k, k_cache, v_cache, v, hn)) {
      const int64_t warps = T * (Hq + Hkv);
      DAPO_CUDA_CHECK(launch_pdl(norm_rope_kv_write_kernel, grid_for(warps * 32, kNormThreads), kNormThreads, 0,
                                 stream_of(ctx), qp, kp, kc, vc, vp, static_cast<const bf16_t*>(hn.q_weight.data),
                                 static_cast<const bf16_t*>(hn.k_weight.data), pos, slots, T, int(Hq), int(Hkv),
                                 int(D), num_slots, hn.eps, inv_freq, ctx.flags));
      return;
    }
    norm_heads(ctx, q, hn.q_weight, hn.eps);
    norm_heads(ctx, k, hn.k_weight, hn.eps);
  }
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
