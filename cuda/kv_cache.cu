// CUDA paged KV cache: slot writes, and the decode-first paged attention.
//
// paged_attention: one CTA per (partition of a sequence's keys, KV head,
// sequence) reads its stretch of K and V once for a tile of up to kRows query
// rows (token, head) of that KV group: all Hq / Hkv heads of a decode token at
// once, so GQA costs no extra cache traffic. Keys are staged kChunk at a time:
// scores into shared memory, the running (max, sum) per row updated, then the
// P.V products accumulated in registers (online softmax across chunks).
// Long contexts are cut into partitions over CTAs (split-KV); each writes
// its partial (max, sum, acc) and a merge kernel combines them in partition
// order. The partition length depends only on host values (max_context_len,
// B, N, shapes), and every reduction has a fixed order: bit-identical reruns.
// Multi-token queries (prefill, chunked prefill) run through the same kernel
// with causal masking per row, with the query tiles of a sequence spread
// over `qsplit` CTAs; correct, not tuned (decode is the hot path).
#include <algorithm>
#include <optional>

#include "common.cuh"
#include "dapo/core/arena.h"
#include "dapo/ops/kv_cache.h"
#include "pack.cuh"

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

// ---- paged_attention ---------------------------------------------------

constexpr int kRows = 8;      // query rows (token, head) per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 256;   // keys whose scores sit in shared memory at once
constexpr int kUnroll = 8;    // key steps whose loads are in flight together
constexpr float kLog2e = 1.4426950408889634f;

struct PagedArgs {
  bf16_t* out;                 // (N, Hq, D)
  const bf16_t* q;             // (N, Hq, D)
  const bf16_t* kc;            // (num_blocks, block_size, Hkv, D)
  const bf16_t* vc;
  const int32_t* table;        // (B, max_blocks)
  const int32_t* lens;         // (B)
  const int32_t* cu;           // (B+1)
  float* part_m;               // (N*Hq, num_parts) running max (log2 units); null with one partition
  float* part_l;               // (N*Hq, num_parts) sum of weights
  float* part_acc;             // (N*Hq, num_parts, D) unnormalised P.V
  int64_t num_blocks;
  int64_t N;
  int block_size, bs_shift;    // bs_shift >= 0 when block_size is a power of two
  int max_blocks, B, Hq, Hkv, group;
  int part_len, num_parts, qsplit, max_ctx;
  float scale_log2;            // scale * log2(e): scores in log2 units, exp2 in the softmax
};

// Whether sequence b's metadata is consistent; malformed sequences are
// skipped by both kernels alike (the CPU op diagnoses them).
__device__ __forceinline__ bool sequence_ok(const PagedArgs& a, int b, int& len, int& q0, int& nq) {
  len = a.lens[b];
  q0 = a.cu[b];
  nq = a.cu[b + 1] - q0;
  return len >= 0 && len <= a.max_ctx && int64_t(len) <= int64_t(a.max_blocks) * a.block_size && nq >= 0 &&
         nq <= len && q0 >= 0 && int64_t(q0) + nq <= a.N;
}

__device__ __forceinline__ void bf16x8_to_f32(const uint4& w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(u[j] << 16);
    f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
  }
}

// Lanes per key: LPK lanes each hold 8 of the D elements of one key row (one
// 16-byte load), so a warp step covers 32 / LPK keys with fully used 16 * LPK
// byte segments.
template <int D>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const PagedArgs a) {
  constexpr int LPK = D / 8;
  constexpr int KPS = 32 / LPK;          // keys per warp step
  constexpr int KPC = KPS * kWarps;      // keys per CTA step
  __shared__ float s_w[kRows][kChunk];   // scores, then weights
  __shared__ float s_red[kWarps][kRows][D];
  __shared__ float s_m[kRows], s_l[kRows], s_alpha[kRows];

  const int part = blockIdx.x, b = blockIdx.z;
  const int g = blockIdx.y / a.qsplit, qs = blockIdx.y % a.qsplit;
  int len, q0, nq;
  if (!sequence_ok(a, b, len, q0, nq)) return;
  const int s0 = part * a.part_len;
  if (s0 >= len) return;  // this sequence has fewer partitions; the merge reads only its own
  const int e0 = min(s0 + a.part_len, len);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % LPK, kslot = lane / LPK;
  const int rows_total = nq * a.group;
  const int32_t* table = a.table + int64_t(b) * a.max_blocks;
  const int64_t slot_stride = int64_t(a.Hkv) * D;

  // Element offset of this lane's 8 elements of key p (kv head g), or -1
  // when its block id is out of range (the key is then masked).
  auto key_offset = [&](int p) -> int64_t {
    const int n = a.bs_shift >= 0 ? p >> a.bs_shift : p / a.block_size;
    const int off = a.bs_shift >= 0 ? p & (a.block_size - 1) : p - n * a.block_size;
    const int64_t blk = table[n];
    if (blk < 0 || blk >= a.num_blocks) return -1;
    return (blk * a.block_size + off) * slot_stride + int64_t(g) * D + sub * 8;
  };

  for (int t = qs; t * kRows < rows_total; t += a.qsplit) {
    float q[kRows][8];
    int pos[kRows];
    int max_pos = -1;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = t * kRows + r;
      pos[r] = -1;
#pragma unroll
      for (int j = 0; j < 8; ++j) q[r][j] = 0.0f;
      if (row < rows_total) {
        const int i = row / a.group, h = g * a.group + row % a.group;
        pos[r] = len - nq + i;
        max_pos = max(max_pos, pos[r]);
        const uint4 w = *reinterpret_cast<const uint4*>(a.q + (int64_t(q0 + i) * a.Hq + h) * D + sub * 8);
        bf16x8_to_f32(w, q[r]);
#pragma unroll
        for (int j = 0; j < 8; ++j) q[r][j] *= a.scale_log2;
      }
    }
    float acc[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[r][j] = 0.0f;
    if (threadIdx.x < kRows) {
      s_m[threadIdx.x] = -INFINITY;
      s_l[threadIdx.x] = 0.0f;
    }
    const int kend = min(e0, max_pos + 1);  // causal: no row of the tile sees keys past max_pos

    for (int cs = s0; cs < kend; cs += kChunk) {
      const int ce = min(cs + kChunk, kend);
      // Scores of keys [cs, ce) for every row of the tile.
      for (int base = cs + warp * KPS; base < ce; base += KPC * kUnroll) {
        uint4 kw[kUnroll];
        bool ok[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int p = base + u * KPC + kslot;
          const int64_t off = p < ce ? key_offset(p) : -1;
          ok[u] = off >= 0;
          kw[u] = ok[u] ? *reinterpret_cast<const uint4*>(a.kc + off) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int p = base + u * KPC + kslot;
          float kf[8];
          bf16x8_to_f32(kw[u], kf);
          float sc[kRows];
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; ++j) s = fmaf(q[r][j], kf[j], s);
#pragma unroll
            for (int o = LPK / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
            sc[r] = s;
          }
          if (p < ce) {
#pragma unroll
            for (int r = 0; r < kRows; ++r)
              if (sub == r % LPK) s_w[r][p - cs] = (p <= pos[r] && ok[u]) ? sc[r] : -INFINITY;
          }
        }
      }
      __syncthreads();
      // Per row: the chunk's max, the new running max, weights and their sum
      // (each row's sum is one warp's fixed butterfly: deterministic).
      const int n = ce - cs;
      for (int r = warp; r < kRows; r += kWarps) {
        float m = -INFINITY;
        for (int kk = lane; kk < n; kk += 32) m = fmaxf(m, s_w[r][kk]);
#pragma unroll
        for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float m_old = s_m[r];
        const float m_new = fmaxf(m_old, m);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: weights 0, no NaN
        float l = 0.0f;
        for (int kk = lane; kk < n; kk += 32) {
          const float w = exp2f(s_w[r][kk] - m_use);
          s_w[r][kk] = w;
          l += w;
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
        __syncwarp();
        if (lane == 0) {
          const float alpha = exp2f(m_old - m_use);
          s_alpha[r] = alpha;
          s_l[r] = s_l[r] * alpha + l;
          s_m[r] = m_new;
        }
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float alpha = s_alpha[r];
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r][j] *= alpha;
      }
      // acc += weights . V over the chunk.
      for (int base = cs + warp * KPS; base < ce; base += KPC * kUnroll) {
        uint4 vw[kUnroll];
        int ps[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int p = base + u * KPC + kslot;
          const int64_t off = p < ce ? key_offset(p) : -1;
          ps[u] = off >= 0 ? p : -1;
          vw[u] = off >= 0 ? *reinterpret_cast<const uint4*>(a.vc + off) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (ps[u] < 0) continue;
          float vf[8];
          bf16x8_to_f32(vw[u], vf);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float w = s_w[r][ps[u] - cs];
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[r][j] = fmaf(w, vf[j], acc[r][j]);
          }
        }
      }
      __syncthreads();  // s_w is rewritten by the next chunk
    }

    // Sum acc over the key slots of each warp, then over the warps, in a fixed order.
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int o = LPK; o < 32; o *= 2) acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], o);
    if (kslot == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int j = 0; j < 8; ++j) s_red[warp][r][sub * 8 + j] = acc[r][j];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kRows * D; e += kThreads) {
      const int r = e / D, d = e % D, row = t * kRows + r;
      if (row >= rows_total) continue;
      float sum = s_red[0][r][d];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum += s_red[w][r][d];
      const int i = row / a.group, h = g * a.group + row % a.group;
      const int64_t orow = int64_t(q0 + i) * a.Hq + h;
      if (a.part_acc == nullptr) {
        a.out[orow * D + d] = __float2bfloat16_rn(sum / s_l[r]);
      } else {
        const int64_t pr = orow * a.num_parts + part;
        a.part_acc[pr * D + d] = sum;
        if (d == 0) {
          a.part_m[pr] = s_m[r];
          a.part_l[pr] = s_l[r];
        }
      }
    }
    __syncthreads();  // s_red, s_m, s_l are reused by the next tile
  }
}

// One warp per output row (token, head): combines the partitions that hold
// keys the row sees, in partition order.
__global__ void __launch_bounds__(kThreads) paged_attention_merge_kernel(const PagedArgs a, int D) {
  const int64_t orow = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (orow >= a.N * a.Hq) return;
  const int i = int(orow / a.Hq);
  // The sequence of token i: the last b with cu[b] <= i.
  int lo = 0, hi = a.B;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (a.cu[mid] <= i) lo = mid;
    else hi = mid;
  }
  int len, q0, nq;
  if (!sequence_ok(a, lo, len, q0, nq) || i < q0 || i >= q0 + nq) return;
  const int pos = len - nq + (i - q0);
  const int np = min(pos / a.part_len + 1, a.num_parts);
  const float* pm = a.part_m + orow * a.num_parts;
  const float* pl = a.part_l + orow * a.num_parts;
  const float* pacc = a.part_acc + orow * a.num_parts * D;
  float m = -INFINITY;
  for (int p = 0; p < np; ++p) m = fmaxf(m, pm[p]);
  float l = 0.0f;
  for (int p = 0; p < np; ++p) l += pl[p] * exp2f(pm[p] - m);
  const float inv_l = 1.0f / l;
  for (int d = lane; d < D; d += 32) {
    float o = 0.0f;
    for (int p = 0; p < np; ++p) o = fmaf(pacc[int64_t(p) * D + d], exp2f(pm[p] - m), o);
    a.out[orow * D + d] = __float2bfloat16_rn(o * inv_l);
  }
}

template <int D>
void launch_paged(const PagedArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned(a.num_parts), unsigned(a.Hkv * a.qsplit), unsigned(a.B));
  paged_attention_kernel<D><<<grid, kThreads, 0, stream>>>(a);
  DAPO_CUDA_CHECK_LAUNCH();
  if (a.part_acc != nullptr) {
    const int64_t rows = a.N * a.Hq;
    paged_attention_merge_kernel<<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(a, D);
    DAPO_CUDA_CHECK_LAUNCH();
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

void paged_attention(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table,
                     Tensor context_lens, Tensor cu_seqlens_q, int64_t max_context_len, float scale) {
  check_cache(ctx, "paged_attention", k_cache, v_cache);
  DAPO_CHECK_DTYPE(out, DType::bf16);
  DAPO_CHECK_DTYPE(q, DType::bf16);
  DAPO_CHECK_DTYPE(block_table, DType::i32);
  DAPO_CHECK_DTYPE(context_lens, DType::i32);
  DAPO_CHECK_DTYPE(cu_seqlens_q, DType::i32);
  DAPO_CHECK(q.ndim == 3, "paged_attention: q ", q.shape_string(), " must be (N, Hq, D)");
  const int64_t N = q.shape[0], Hq = q.shape[1], num_blocks = k_cache.shape[0], block_size = k_cache.shape[1];
  const int64_t Hkv = k_cache.shape[2], D = k_cache.shape[3];
  DAPO_CHECK(q.shape[2] == D, "paged_attention: q ", q.shape_string(), " vs cache head dim ", D);
  DAPO_CHECK(Hq % Hkv == 0, "paged_attention: Hq = ", Hq, " is not a multiple of Hkv = ", Hkv);
  DAPO_CHECK_SHAPE(out, {N, Hq, D});
  DAPO_CHECK(block_table.ndim == 2, "paged_attention: block_table ", block_table.shape_string(),
             " must be (B, max_blocks)");
  const int64_t B = block_table.shape[0], max_blocks = block_table.shape[1];
  DAPO_CHECK_SHAPE(context_lens, {B});
  DAPO_CHECK_SHAPE(cu_seqlens_q, {B + 1});
  for (const Tensor* t : {&out, &q, &block_table, &context_lens, &cu_seqlens_q})
    check_device(ctx, *t, "paged_attention tensor");
  DAPO_CHECK(D == 16 || D == 32 || D == 64 || D == 128, "paged_attention on CUDA: head dim ", D,
             " (supported: 16, 32, 64, 128)");
  if (N == 0 || Hq == 0) return;
  DAPO_CHECK(max_context_len > 0 && max_context_len <= (int64_t(1) << 30), "paged_attention: max_context_len ",
             max_context_len, " with ", N, " new tokens");
  DAPO_CHECK(B > 0 && B <= 65535, "paged_attention on CUDA: B = ", B, " sequences (at most 65535)");
  DAPO_CHECK(N * Hq <= (int64_t(1) << 31) / 2 && block_size <= (1 << 20) && max_blocks <= (1 << 30),
             "paged_attention on CUDA: shapes too large");
  DAPO_CHECK(aligned16(out.data) && aligned16(q.data) && aligned16(k_cache.data) && aligned16(v_cache.data),
             "paged_attention on CUDA: q, out and the caches must be 16-byte aligned");

  PagedArgs a{};
  a.out = static_cast<bf16_t*>(out.data);
  a.q = static_cast<const bf16_t*>(q.data);
  a.kc = static_cast<const bf16_t*>(k_cache.data);
  a.vc = static_cast<const bf16_t*>(v_cache.data);
  a.table = block_table.ptr<int32_t>();
  a.lens = context_lens.ptr<int32_t>();
  a.cu = cu_seqlens_q.ptr<int32_t>();
  a.num_blocks = num_blocks;
  a.N = N;
  a.block_size = int(block_size);
  a.bs_shift = (block_size & (block_size - 1)) == 0 ? __builtin_ctzll(uint64_t(block_size)) : -1;
  a.max_blocks = int(max_blocks);
  a.B = int(B);
  a.Hq = int(Hq);
  a.Hkv = int(Hkv);
  a.group = int(Hq / Hkv);
  a.max_ctx = int(max_context_len);
  a.scale_log2 = scale * kLog2e;

  // Partition length: 512 keys, halved (down to 128) while the grid would
  // leave SMs idle, doubled while the partials would exceed 64 MiB (long
  // prefills). Host values only, so the same shapes give the same bits.
  const int64_t rows = N * Hq;
  auto parts_for = [&](int64_t len) { return (max_context_len + len - 1) / len; };
  int64_t part_len = 512;
  while (part_len > 128 && B * Hkv * parts_for(part_len) < 1024) part_len /= 2;
  while (parts_for(part_len) > 1 && rows * parts_for(part_len) * (D + 2) * 4 > (int64_t(64) << 20)) part_len *= 2;
  a.part_len = int(part_len);
  a.num_parts = int(parts_for(part_len));
  // Query tiles of one sequence over several CTAs: decode batches (one row
  // tile per sequence when every sequence has one token) use one.
  const int64_t tiles = (std::min(N, max_context_len) * a.group + kRows - 1) / kRows;
  a.qsplit = N == B ? 1 : int(std::clamp<int64_t>(tiles, 1, 64));
  DAPO_CHECK(Hkv * a.qsplit <= 65535, "paged_attention on CUDA: Hkv = ", Hkv, " too large");

  DAPO_CHECK(ctx.scratch != nullptr || a.num_parts == 1, "paged_attention needs ctx.scratch");
  std::optional<ArenaScope> scope;
  if (a.num_parts > 1) {
    scope.emplace(*ctx.scratch);
    const size_t pr = size_t(rows) * size_t(a.num_parts);
    a.part_m = ctx.scratch->alloc_array<float>(pr);
    a.part_l = ctx.scratch->alloc_array<float>(pr);
    a.part_acc = ctx.scratch->alloc_array<float>(pr * size_t(D));
  }
  const cudaStream_t stream = stream_of(ctx);
  switch (D) {
    case 16: launch_paged<16>(a, stream); break;
    case 32: launch_paged<32>(a, stream); break;
    case 64: launch_paged<64>(a, stream); break;
    default: launch_paged<128>(a, stream); break;
  }
}

}  // namespace dapo::ops::cuda
