// CUDA attention forward: FlashAttention-2 over packed causal GQA sequences.
// One CTA per (query block of BM rows, query head); its warps own 16-row
// m-tiles of the block and stream the sequence's key/value blocks of BN rows
// from 0 up to the diagonal through double-buffered shared memory (cp.async),
// with S = Q K^T and O += P V on tensor cores (mma.sync bf16, fp32
// accumulators) and the softmax online in fp32 (exp2, scale folded in).
// Key blocks run in ascending order, so block 0 - whose key 0 every query
// sees - sets a finite running max before any fully masked row appears.
//
// The same kernel reads keys and values from the paged KV cache for the
// batch-invariant paged attention (attention_paged_exact.h): a query row's
// arithmetic - its key blocks of BN from position 0, in order, the same
// mma and online softmax - does not depend on the rows around it, on BM or
// on where the keys are stored, so the engine's cached step and the
// trainer's packed forward give the same bits.
#include "attention/attention_common.cuh"
#include "attention/attention_paged_exact.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda::detail::attn {

// Sequences up to this many have their block counts staged in shared
// memory: every thread scans all of them, and from global memory that scan
// was most of the kernel (0.5B prefill, 128 sequences: 34 us a call).
constexpr int kTileTableStaged = 4096;

// The longest sequence of a call that counts as short (the D = 64 tiles below).
constexpr int64_t kShortSeqlen = 512;

// Threads of the one CTA that builds a work table; they stride over the
// sequences and the table's entries.
constexpr int kTileTableThreads = 512;

__global__ void build_tile_table_kernel(int2* tiles, const int32_t* cu, int B, int T, int block, int n_entries,
                                        bool last_first) {
  __shared__ int s_nb[kTileTableStaged];
  __shared__ int s_total;
  auto blocks_of = [&](int b) {
    const int s = cu[b], e = cu[b + 1];
    return (s < 0 || e < s || e > T) ? 0 : (e - s + block - 1) / block;
  };
  const bool staged = B <= kTileTableStaged;
  if (threadIdx.x == 0) s_total = 0;
  __syncthreads();
  int part = 0;
  for (int b = threadIdx.x; b < B; b += blockDim.x) {
    const int nb = blocks_of(b);
    if (staged) s_nb[b] = nb;
    part += nb;
  }
  atomicAdd(&s_total, part);  // integers: the order does not matter
  __syncthreads();
  auto nb_of = [&](int b) { return staged ? s_nb[b] : blocks_of(b); };
  const int total = s_total;
  for (int b = threadIdx.x; b < B; b += blockDim.x) {
    const int nb = nb_of(b);
    if (nb == 0) continue;
    int start = 0;  // blocks of the sequences ordered before b
    for (int o = 0; o < B; ++o) {
      const int no = nb_of(o);
      if (no > nb || (no == nb && o < b)) start += no;
    }
    for (int i = 0; i < nb && start + i < n_entries; ++i)
      tiles[start + i] = make_int2(b, last_first ? nb - 1 - i : i);
  }
  for (int i = total + threadIdx.x; i < n_entries; i += blockDim.x) tiles[i] = make_int2(-1, -1);
}

cudaError_t launch_build_tile_table(int2* tiles, const int32_t* cu, int B, int T, int block, int n_entries,
                                    bool last_first, cudaStream_t stream) {
  build_tile_table_kernel<<<1, kTileTableThreads, 0, stream>>>(tiles, cu, B, T, block, n_entries, last_first);
  return cudaGetLastError();
}

}  // namespace dapo::ops::cuda::detail::attn

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;
using namespace cuda::detail::attn;

struct FwdParams {
  const bf16_t* q;      // (T, Hq, D)
  const bf16_t* k;      // (T, Hkv, D)
  const bf16_t* v;      // (T, Hkv, D)
  bf16_t* out;          // (T, Hq, D)
  float* lse;           // (Hq, T)
  const int32_t* cu;    // (B+1)
  const int2* tiles;    // (gridDim.y) (sequence, query block)
  int64_t T;
  int Hq, Hkv, group;
  float scale, scale_log2;
  // PAGED kernels: k and v are the caches (num_blocks, block_size, Hkv, D);
  // the query rows of sequence b are the last cu[b+1] - cu[b] of its
  // context_lens[b] positions; lse is not written.
  const int32_t* block_table;   // (B, table_width)
  const int32_t* context_lens;  // (B)
  int table_width, block_size, num_blocks;
};

// Rows [0, rows_valid) of a key/value tile from the paged cache: row r is
// position j0 + r of the sequence whose block ids are `table`; zeros
// beyond, and for a block id outside the pool.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile_paged(uint32_t s, const bf16_t* cache, const int32_t* table,
                                                const FwdParams& p, int64_t stride, int head, int j0, int rows_valid,
                                                int tid) {
  constexpr int kChunksPerRow = D / 8, kTotal = ROWS * kChunksPerRow;
  static_assert(kTotal % NT == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < kTotal / NT; ++i) {
    const int c = tid + i * NT, r = c / kChunksPerRow, ch = c % kChunksPerRow;
    const int j = j0 + r;
    const int block = r < rows_valid ? table[j / p.block_size] : -1;
    const bool ok = block >= 0 && block < p.num_blocks;
    const int64_t slot = ok ? int64_t(block) * p.block_size + j % p.block_size : 0;
    cp_async_16(s + chunk_offset<D>(r, ch), cache + (ok ? slot * stride + head * D + ch * 8 : 0), ok);
  }
}

// BM query rows per CTA, BN keys per step, NW warps; each warp owns
// MT = BM / (16 NW) m-tiles. With one m-tile Q's fragments stay in registers
// for the whole loop; with more they are re-read from shared memory.
template <int D, int BM, int BN, int NW, int MIN_BLOCKS, bool PAGED>
__global__ void __launch_bounds__(kCtaThreads<NW>, MIN_BLOCKS) attention_forward_kernel(const FwdParams p) {
  constexpr int NT = kCtaThreads<NW>, MT = BM / (16 * NW), NB = BN / 8, KC = D / 16, DB = D / 8;
  constexpr bool kQInRegs = MT == 1;
  static_assert(BM % (16 * NW) == 0 && BN % 16 == 0, "tile sizes");
  constexpr uint32_t kKvTileBytes = BN * D * 2;

  const int2 tile = p.tiles[blockIdx.y];
  if (tile.x < 0) return;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem);
  const uint32_t sQa = smem_u32(smem), sKa = sQa + BM * D * 2, sVa = sKa + 2 * kKvTileBytes;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.x, g = h / p.group;
  // len: the sequence's query rows; kv_len its keys; off the position of
  // its first query row (0 when packed: queries and keys are one sequence).
  const int seq0 = p.cu[tile.x], len = p.cu[tile.x + 1] - seq0;
  const int kv_len = PAGED ? p.context_lens[tile.x] : len;
  const int off = kv_len - len;
  if (PAGED && (off < 0 || (kv_len + p.block_size - 1) / p.block_size > p.table_width)) return;  // malformed
  const int m0 = tile.y * BM;
  const int q_rows = min(BM, len - m0);
  const int n_blocks = (off + min(m0 + BM, len) + BN - 1) / BN;  // key blocks some row of this block sees
  const int64_t q_stride = int64_t(p.Hq) * D, kv_stride = int64_t(p.Hkv) * D;
  const bf16_t* qg = p.q + (seq0 + m0) * q_stride + h * D;
  const bf16_t* kg = PAGED ? p.k : p.k + seq0 * kv_stride + g * D;
  const bf16_t* vg = PAGED ? p.v : p.v + seq0 * kv_stride + g * D;
  const int32_t* table = PAGED ? p.block_table + int64_t(tile.x) * p.table_width : nullptr;
  const int row_w = warp * MT * 16;  // the warp's first row in the block
  // Key block n (from key n * BN) into stage `stage` of sK and sV.
  auto load_kv = [&](int n, int stage) {
    const int n1 = n * BN, rows = min(BN, kv_len - n1);
    if constexpr (PAGED) {
      load_tile_paged<BN, D, NT>(sKa + stage * kKvTileBytes, kg, table, p, kv_stride, g, n1, rows, tid);
      load_tile_paged<BN, D, NT>(sVa + stage * kKvTileBytes, vg, table, p, kv_stride, g, n1, rows, tid);
    } else {
      load_tile<BN, D, NT>(sKa + stage * kKvTileBytes, kg + n1 * kv_stride, kv_stride, rows, tid);
      load_tile<BN, D, NT>(sVa + stage * kKvTileBytes, vg + n1 * kv_stride, kv_stride, rows, tid);
    }
  };

  load_tile<BM, D, NT>(sQa, qg, q_stride, q_rows, tid);
  load_kv(0, 0);
  cp_async_commit();

  float o[MT][DB][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int db = 0; db < DB; ++db)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][db][e] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  uint32_t qf[kQInRegs ? KC : 1][4];

  for (int n = 0; n < n_blocks; ++n) {
    const int stage = n & 1;
    if (n + 1 < n_blocks) load_kv(n + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (kQInRegs) {
      if (n == 0) {
#pragma unroll
        for (int kc = 0; kc < KC; ++kc) load_a<D>(qf[kc], sQa, row_w, kc, lane);
      }
    }
    const uint32_t sK = sKa + stage * kKvTileBytes, sV = sVa + stage * kKvTileBytes;

    // S = Q K^T (raw scores, scale applied in the exponent).
    float s[MT][NB][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nb][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      uint32_t a[MT][4];
      if constexpr (kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[0][e] = qf[kc][e];
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) load_a<D>(a[mt], sQa, row_w + mt * 16, kc, lane);
      }
#pragma unroll
      for (int nb2 = 0; nb2 < NB / 2; ++nb2) {
        uint32_t b[4];
        load_b<D>(b, sK, nb2 * 16, kc, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][2 * nb2], a[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * nb2 + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Causal mask on the blocks that reach past the block's first query.
    const int n0 = n * BN;
    if (n0 + BN - 1 > off + m0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = off + m0 + row_w + mt * 16 + (lane >> 2) + (e >> 1) * 8;
            const int col = n0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            if (col > row) s[mt][nb][e] = -INFINITY;
          }
    }

    // Online softmax: rescale the running sums to the new row max.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m[mt][r];
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * r], s[mt][nb][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float alpha = exp2_approx((m[mt][r] - mx) * p.scale_log2);
        m[mt][r] = mx;
        const float ms = mx * p.scale_log2;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pe = exp2_approx(fmaf(s[mt][nb][2 * r + e], p.scale_log2, -ms));
            s[mt][nb][2 * r + e] = pe;
            sum += pe;
          }
        l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
        for (int db = 0; db < DB; ++db) {
          o[mt][db][2 * r] *= alpha;
          o[mt][db][2 * r + 1] *= alpha;
        }
      }

    // O += P V, P straight from the score registers.
#pragma unroll
    for (int kc = 0; kc < NB / 2; ++kc) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_to_a(a[mt], s[mt][2 * kc], s[mt][2 * kc + 1]);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t b[4];
        load_b_trans<D>(b, sV, kc * 16, np, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(o[mt][2 * np], a[mt], b[0], b[1]);
          mma_bf16(o[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this stage
  }

  // Normalise, write lse, stage O in the warp's own rows of sQ, copy out.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = 1.0f / sum;
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        o[mt][db][2 * r] *= inv;
        o[mt][db][2 * r + 1] *= inv;
      }
      const int row = row_w + mt * 16 + (lane >> 2) + r * 8;
      if (!PAGED && (lane & 3) == 0 && row < q_rows) p.lse[h * p.T + seq0 + m0 + row] = m[mt][r] * p.scale + logf(sum);
    }
    stage_rows<D>(sQ, row_w + mt * 16, o[mt], lane);
  }
  __syncthreads();
  store_tile<BM, D, NT>(p.out + (seq0 + m0) * q_stride + h * D, q_stride, sQ, q_rows, tid);
}

template <int D, int BM, int BN, int NW, int MIN_BLOCKS, bool PAGED = false>
cudaError_t launch_forward(const FwdParams& p, int n_tiles, cudaStream_t stream) {
  constexpr int kSmem = (BM + 4 * BN) * D * 2;
  auto kernel = attention_forward_kernel<D, BM, BN, NW, MIN_BLOCKS, PAGED>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(unsigned(p.Hq), unsigned(n_tiles)), kCtaThreads<NW>, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace


void attention_forward(const Ctx& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, Tensor cu_seqlens,
                       int64_t max_seqlen, float scale) {
  // The contract is checked by ops::attention_forward; here the kernels' limits.
  const char* op = "attention_forward";
  const Dims d = check_kernel_limits(op, q, k, cu_seqlens);
  check_aligned(op, {{&out, "out"}, {&q, "q"}, {&k, "k"}, {&v, "v"}});
  if (d.T == 0 || d.Hq == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "attention_forward needs ctx.scratch");

  // Tiles measured on an H100 SXM (4 x 4096 and 1 x 16384 tokens): D = 128
  // runs best with 64-row query blocks, one m-tile per warp and Q in
  // registers; D = 64 with 128-row blocks, two m-tiles per warp (each K/V
  // fragment read from shared memory feeds two products). D = 32 and 16
  // (small test and demo models, not tuned) take D = 64's tiles.
  // Short sequences (a generation prefill of 256-token prompts) at D = 64
  // take 64-row blocks, Q in registers and 4 CTAs an SM: more, shorter CTAs
  // (H100, 0.5B, 128 x 256 tokens: 108 us against 117; at 4 x 4096 they
  // lose, 461 against 397).
  const bool short_d64 = d.D == 64 && max_seqlen <= kShortSeqlen;
  const int block_m = d.D == 128 || short_d64 ? 64 : 128;
  const cudaStream_t stream = stream_of(ctx);
  ArenaScope scope(*ctx.scratch);
  const int n_tiles = tile_table_entries(d.T, d.B, block_m);
  int2* tiles = ctx.scratch->alloc_array<int2>(size_t(n_tiles));
  DAPO_CUDA_CHECK(launch_build_tile_table(tiles, cu_seqlens.ptr<int32_t>(), int(d.B), int(d.T), block_m, n_tiles,
                                          /*last_first=*/true, stream));
  FwdParams p{};
  p.q = static_cast<const bf16_t*>(q.data);
  p.k = static_cast<const bf16_t*>(k.data);
  p.v = static_cast<const bf16_t*>(v.data);
  p.out = static_cast<bf16_t*>(out.data);
  p.lse = lse.ptr<float>();
  p.cu = cu_seqlens.ptr<int32_t>();
  p.tiles = tiles;
  p.T = d.T;
  p.Hq = int(d.Hq);
  p.Hkv = int(d.Hkv);
  p.group = int(d.group);
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  switch (d.D) {
    case 16: DAPO_CUDA_CHECK((launch_forward<16, 128, 64, 4, 2>(p, n_tiles, stream))); break;
    case 32: DAPO_CUDA_CHECK((launch_forward<32, 128, 64, 4, 2>(p, n_tiles, stream))); break;
    case 64:
      if (short_d64)
        DAPO_CUDA_CHECK((launch_forward<64, 64, 64, 4, 4>(p, n_tiles, stream)));
      else
        DAPO_CUDA_CHECK((launch_forward<64, 128, 64, 4, 2>(p, n_tiles, stream)));
      break;
    default: DAPO_CUDA_CHECK((launch_forward<128, 64, 64, 4, 2>(p, n_tiles, stream))); break;
  }
}

namespace detail {

void attention_paged_exact(const Ctx& ctx, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table,
                           Tensor context_lens, Tensor cu_seqlens_q, float scale) {
  const int64_t N = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k_cache.shape[2];
  const int64_t B = cu_seqlens_q.shape[0] - 1;
  if (N == 0 || Hq == 0 || B == 0) return;
  DAPO_CHECK(D == 16 || D == 32 || D == 64 || D == 128, "batch-invariant paged_attention: head_dim ", D,
             " (16, 32, 64 or 128)");
  DAPO_CHECK(q.dtype == DType::bf16, "batch-invariant paged_attention: bf16 q, got ", dtype_name(q.dtype));
  DAPO_CHECK(ctx.scratch != nullptr, "paged_attention needs ctx.scratch");
  const cudaStream_t stream = stream_of(ctx);
  // The training kernel's key blocks (BN = 64 from position 0) and its
  // per-row arithmetic; the query block (64 rows) is any: rows are
  // independent of their block.
  constexpr int kBlockM = 64;
  ArenaScope scope(*ctx.scratch);
  const int n_tiles = tile_table_entries(N, B, kBlockM);
  int2* tiles = ctx.scratch->alloc_array<int2>(size_t(n_tiles));
  DAPO_CUDA_CHECK(launch_build_tile_table(tiles, cu_seqlens_q.ptr<int32_t>(), int(B), int(N), kBlockM, n_tiles,
                                          /*last_first=*/true, stream));
  FwdParams p{};
  p.q = static_cast<const bf16_t*>(q.data);
  p.k = static_cast<const bf16_t*>(k_cache.data);
  p.v = static_cast<const bf16_t*>(v_cache.data);
  p.out = static_cast<bf16_t*>(out.data);
  p.cu = cu_seqlens_q.ptr<int32_t>();
  p.tiles = tiles;
  p.T = N;
  p.Hq = int(Hq);
  p.Hkv = int(Hkv);
  p.group = int(Hq / Hkv);
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  p.block_table = block_table.ptr<int32_t>();
  p.context_lens = context_lens.ptr<int32_t>();
  p.table_width = int(block_table.shape[1]);
  p.block_size = int(k_cache.shape[1]);
  p.num_blocks = int(k_cache.shape[0]);
  switch (D) {
    case 16: DAPO_CUDA_CHECK((launch_forward<16, 64, 64, 4, 2, true>(p, n_tiles, stream))); break;
    case 32: DAPO_CUDA_CHECK((launch_forward<32, 64, 64, 4, 2, true>(p, n_tiles, stream))); break;
    case 64: DAPO_CUDA_CHECK((launch_forward<64, 64, 64, 4, 4, true>(p, n_tiles, stream))); break;
    default: DAPO_CUDA_CHECK((launch_forward<128, 64, 64, 4, 2, true>(p, n_tiles, stream))); break;
  }
}

}  // namespace detail

}  // namespace dapo::ops::cuda
