// CUDA token embedding (vocab-parallel, as the CPU op). The lookup copies
// rows bit for bit (16-byte units where the rows allow; any dtype, so the
// model also uses it as a row gather). The backward is a deterministic
// scatter-add without float atomics:
//   1. key[i] = this shard's row of ids[i] (other shards: a sentinel V);
//   2. a stable radix sort of (key, i): equal keys keep row order;
//   3. the sorted positions are cut into chunks of kSortChunk; per chunk and
//      column tile one CTA sums each run of equal keys in row order. A run
//      inside the chunk is added to dweight at once; a run cut by a chunk
//      boundary leaves its piece in scratch (`tail` for the piece that starts
//      the run, `head` for a piece that continues it);
//   4. per run that crosses a boundary, the CTA of its first chunk adds
//      tail + head + head ... in chunk order and then adds that to dweight.
// Every dweight row is written by exactly one CTA, and every sum has an
// order fixed by the ids alone. A frequent id costs one piece per chunk,
// not one long serial loop.
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
#include "dapo/ops/embedding.h"
#include "ptx/pack.cuh"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

constexpr int kWarpsPerBlock = 8;  // forward: one warp per row
constexpr int kSortChunk = 64;     // backward: sorted positions per CTA
constexpr int kTileThreads = 64;   // backward: threads per CTA, K columns each
constexpr int kKeyThreads = 256;   // backward's sort keys: a grid-stride loop over the ids
constexpr int kRowsInFlight = 8;   // backward: rows loaded before they are added

// U: the copy unit (16 bytes, or one element's bits).
template <class U>
__global__ void forward_kernel(U* __restrict__ out, const int32_t* __restrict__ ids, const U* __restrict__ weight,
                               int64_t N, int64_t V, int64_t row_units, int64_t vocab_start, DeviceFlags* flags) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); row < N; row += warps) {
    const int32_t id = ids[row];
    if (id < 0 && lane == 0) flag_bad_id(flags, FlagSite::embedding, row, id);
    const int64_t local = int64_t(id) - vocab_start;
    U* dst = out + row * row_units;
    if (id >= 0 && local >= 0 && local < V) {
      const U* src = weight + local * row_units;
#pragma unroll 4
      for (int64_t u = lane; u < row_units; u += 32) dst[u] = src[u];
    } else {
      for (int64_t u = lane; u < row_units; u += 32) dst[u] = U{};
    }
  }
}

__global__ void keys_kernel(uint32_t* keys, int32_t* rows, const int32_t* ids, int64_t N, int64_t V,
                            int64_t vocab_start, DeviceFlags* flags) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t id = ids[i];
    if (id < 0) flag_bad_id(flags, FlagSite::embedding, i, id);
    const int64_t local = int64_t(id) - vocab_start;
    keys[i] = id >= 0 && local >= 0 && local < V ? uint32_t(local) : uint32_t(V);
    rows[i] = int32_t(i);
  }
}

template <int K>
__device__ __forceinline__ void store_row(float* dst, const float (&acc)[K]) {
  if constexpr (K % 4 == 0) {
#pragma unroll
    for (int q = 0; q < K / 4; ++q)
      reinterpret_cast<float4*>(dst)[q] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) dst[k] = acc[k];
  }
}

template <int K>
__device__ __forceinline__ void add_to_row(float* dst, const float (&acc)[K]) {
  if constexpr (K % 4 == 0) {
#pragma unroll
    for (int q = 0; q < K / 4; ++q) {
      float4 v = reinterpret_cast<const float4*>(dst)[q];
      v.x += acc[4 * q], v.y += acc[4 * q + 1], v.z += acc[4 * q + 2], v.w += acc[4 * q + 3];
      reinterpret_cast<float4*>(dst)[q] = v;
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) dst[k] += acc[k];
  }
}

// Step 3 (see the top): CTA (chunk, tile) over sorted positions
// [chunk * kSortChunk, ...), columns of its tile.
template <class T, int K>
__global__ void __launch_bounds__(kTileThreads) segment_sum_kernel(float* dweight, float* head, float* tail,
                                                                   const T* dout, const uint32_t* keys,
                                                                   const int32_t* rows, int64_t N, int64_t C,
                                                                   uint32_t sentinel) {
  const int64_t chunk = blockIdx.x;
  const int64_t p_begin = chunk * kSortChunk;
  const int64_t p_end = p_begin + kSortChunk < N ? p_begin + kSortChunk : N;
  const int64_t col = (int64_t(blockIdx.y) * kTileThreads + threadIdx.x) * K;
  if (col >= C) return;
  for (int64_t p = p_begin; p < p_end;) {
    const uint32_t key = keys[p];
    if (key == sentinel) break;  // the sentinel sorts last: the rest is other shards' ids
    int64_t q = p + 1;
    while (q < p_end && keys[q] == key) ++q;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = 0.0f;
    for (int64_t r = p; r < q; r += kRowsInFlight) {
      Pack<T, K> v[kRowsInFlight];
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j)
        if (r + j < q) v[j] = load_pack<T, K>(dout + int64_t(rows[r + j]) * C + col);
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j)
        if (r + j < q) {
#pragma unroll
          for (int k = 0; k < K; ++k) acc[k] += widen(v[j].v[k]);
        }
    }
    const bool run_starts = p == 0 || keys[p - 1] != key;
    const bool run_ends = q == N || keys[q] != key;
    if (run_starts && run_ends) add_to_row<K>(dweight + int64_t(key) * C + col, acc);
    else if (!run_starts) store_row<K>(head + chunk * C + col, acc);  // the chunk's first piece
    else store_row<K>(tail + chunk * C + col, acc);                   // the chunk's last piece
    p = q;
  }
}

// Step 4: the run that the last piece of CTA `chunk` starts, if it crosses
// into the next chunk.
template <int K>
__global__ void __launch_bounds__(kTileThreads) carry_kernel(float* dweight, const float* head, const float* tail,
                                                             const uint32_t* keys, int64_t N, int64_t C,
                                                             uint32_t sentinel) {
  const int64_t chunk = blockIdx.x;
  const int64_t p_begin = chunk * kSortChunk;
  const int64_t e = (p_begin + kSortChunk < N ? p_begin + kSortChunk : N) - 1;
  if (e + 1 >= N) return;
  const uint32_t key = keys[e];
  if (key == sentinel || keys[e + 1] != key) return;
  if (p_begin > 0 && keys[p_begin] == key && keys[p_begin - 1] == key) return;  // started in an earlier chunk
  const int64_t col = (int64_t(blockIdx.y) * kTileThreads + threadIdx.x) * K;
  if (col >= C) return;
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = tail[chunk * C + col + k];
  for (int64_t c = chunk + 1;; ++c) {
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] += head[c * C + col + k];
    const int64_t e2 = ((c + 1) * kSortChunk < N ? (c + 1) * kSortChunk : N) - 1;
    if (keys[e2] != key || e2 + 1 >= N || keys[e2 + 1] != key) break;
  }
  add_to_row<K>(dweight + int64_t(key) * C + col, acc);
}

template <class T, int K>
void launch_segment_sums(const Ctx& ctx, float* dweight, const T* dout, const uint32_t* keys, const int32_t* rows,
                         int64_t N, int64_t C, uint32_t sentinel) {
  const int64_t chunks = (N + kSortChunk - 1) / kSortChunk;
  const int64_t tiles = (C / K + kTileThreads - 1) / kTileThreads;
  DAPO_CHECK(chunks < (int64_t(1) << 31) && tiles < 65536, "embedding_backward: too large (", N, " x ", C, ")");
  float* head = ctx.scratch->alloc_array<float>(size_t(chunks * C));
  float* tail = ctx.scratch->alloc_array<float>(size_t(chunks * C));
  const dim3 grid{unsigned(chunks), unsigned(tiles)};
  segment_sum_kernel<T, K><<<grid, kTileThreads, 0, stream_of(ctx)>>>(dweight, head, tail, dout, keys, rows, N, C,
                                                                      sentinel);
  DAPO_CUDA_CHECK_LAUNCH();
  carry_kernel<K><<<grid, kTileThreads, 0, stream_of(ctx)>>>(dweight, head, tail, keys, N, C, sentinel);
  DAPO_CUDA_CHECK_LAUNCH();
}

template <class T>
void backward_typed(const Ctx& ctx, float* dweight, const T* dout, const uint32_t* keys, const int32_t* rows,
                    int64_t N, int64_t C, uint32_t sentinel) {
  constexpr int kWide = kWidePack<T>;
  if (C % kWide == 0 && aligned16(dout) && aligned16(dweight))
    launch_segment_sums<T, kWide>(ctx, dweight, dout, keys, rows, N, C, sentinel);
  else
    launch_segment_sums<T, 1>(ctx, dweight, dout, keys, rows, N, C, sentinel);
}

template <class U>
void launch_forward(const Ctx& ctx, void* out, const int32_t* ids, const void* weight, int64_t N, int64_t V,
                    int64_t row_units, int64_t vocab_start) {
  const int64_t blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const unsigned grid = unsigned(blocks < (int64_t(1) << 20) ? blocks : (int64_t(1) << 20));
  forward_kernel<U><<<grid, 32 * kWarpsPerBlock, 0, stream_of(ctx)>>>(
      static_cast<U*>(out), ids, static_cast<const U*>(weight), N, V, row_units, vocab_start, ctx.flags);
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace

// The contract (dtypes, shapes, aliasing, vocab_start) is checked by ops::embedding_forward.
void embedding_forward(const Ctx& ctx, Tensor out, Tensor ids, Tensor weight, int64_t vocab_start) {
  const int64_t N = ids.shape[0], V = weight.shape[0], C = weight.shape[1];
  if (N == 0 || C == 0) return;
  const int64_t row_bytes = C * int64_t(dtype_size(weight.dtype));
  if (row_bytes % 16 == 0 && aligned16(out.data) && aligned16(weight.data))
    launch_forward<uint4>(ctx, out.data, ids.ptr<int32_t>(), weight.data, N, V, row_bytes / 16, vocab_start);
  else if (weight.dtype == DType::f32)
    launch_forward<uint32_t>(ctx, out.data, ids.ptr<int32_t>(), weight.data, N, V, C, vocab_start);
  else
    launch_forward<uint16_t>(ctx, out.data, ids.ptr<int32_t>(), weight.data, N, V, C, vocab_start);
}

void embedding_backward(const Ctx& ctx, Tensor dweight, Tensor dout, Tensor ids, int64_t vocab_start) {
  const int64_t N = ids.shape[0], V = dweight.shape[0], C = dweight.shape[1];
  // The sort keys are 32-bit.
  DAPO_CHECK(N < (int64_t(1) << 31) && V < (int64_t(1) << 31), "embedding_backward: ", N, " ids, ", V,
             " rows: too many");
  if (N == 0 || C == 0 || V == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "embedding_backward on CUDA needs ctx.scratch");
  ArenaScope scope(*ctx.scratch);
  Arena& arena = *ctx.scratch;
  uint32_t* keys_in = arena.alloc_array<uint32_t>(size_t(N));
  uint32_t* keys = arena.alloc_array<uint32_t>(size_t(N));
  int32_t* rows_in = arena.alloc_array<int32_t>(size_t(N));
  int32_t* rows = arena.alloc_array<int32_t>(size_t(N));
  const uint32_t sentinel = uint32_t(V);
  int end_bit = 1;
  while (end_bit < 32 && (uint64_t(sentinel) >> end_bit) != 0) ++end_bit;

  keys_kernel<<<grid_for(N, kKeyThreads), kKeyThreads, 0, stream_of(ctx)>>>(keys_in, rows_in, ids.ptr<int32_t>(), N, V, vocab_start,
                                                           ctx.flags);
  DAPO_CUDA_CHECK_LAUNCH();
  size_t temp_bytes = 0;
  DAPO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys, rows_in, rows, N, 0, end_bit,
                                                  stream_of(ctx)));
  void* temp = arena.alloc_bytes(temp_bytes);
  DAPO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, rows_in, rows, N, 0, end_bit,
                                                  stream_of(ctx)));
  if (dout.dtype == DType::f32)
    backward_typed<float>(ctx, dweight.ptr<float>(), dout.ptr<float>(), keys, rows, N, C, sentinel);
  else
    backward_typed<__nv_bfloat16>(ctx, dweight.ptr<float>(), static_cast<const __nv_bfloat16*>(dout.data), keys,
                                  rows, N, C, sentinel);
}

}  // namespace dapo::ops::cuda
