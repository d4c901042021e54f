// RMSNorm kernels shared by rmsnorm.cu and residual_rmsnorm.cu (the fused
// residual add is a compile-time switch of the same kernels): fp32 math on
// f32 or bf16 storage.
//
// Layout: a CTA works on one row at a time; thread t holds 16-byte packs
// t, t + B, ..., so that a row stays in registers between its reduction and
// its output (one read of the input, one write). B <= 256 and the packs per
// thread (VPT) follow C: bf16 rows of C = 896..8192 take 128..256 threads.
//
// dweight is a deterministic two-stage column reduction: the rows are cut
// into chunks that depend only on N, each CTA sums its chunk's rows in row
// order into a partial row of fp32 scratch, and a second kernel adds the
// partials in chunk order (a fixed tree of 32 strided sums) to dweight.
#pragma once

#include <type_traits>

#include "common.cuh"
#include "ptx/pack.cuh"
#include "ptx/pdl.cuh"

namespace dapo::ops::cuda::detail::norm {

// The most threads of a row's CTA, and the CTA of the element-by-element
// kernels: __launch_bounds__ leaves each thread registers for its packs.
constexpr int kMaxThreads = 256;

constexpr int kMaxChunks = 1024;  // dweight partial rows: <= 1024 * C floats of scratch

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Every thread gets the same sum, added in a fixed order (blockDim.x is a
// multiple of 32). smem: 32 floats; reusable right after the call.
__device__ __forceinline__ float block_sum(float v, float* smem) {
  v = warp_sum(v);
  const int warps = blockDim.x >> 5;
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < warps; ++i) s += smem[i];
  __syncthreads();
  return s;
}

// kResidual: x = round(a + b) is stored to `sum` and normalised from its
// rounded value; sum may be a or b (each element is read and written by one
// thread). Otherwise x = a, and sum, b are unused. Each CTA loads its next
// row before it reduces the current one, so that a load is in flight
// across the reduction's barriers.
template <class T, int K, int VPT, bool kResidual>
__global__ void __launch_bounds__(kMaxThreads) forward_kernel(T* out, float* rstd, T* sum, const T* a, const T* b,
                                                     const T* weight, int64_t N, int C, float eps) {
  __shared__ float smem[32];
  pdl_wait();  // launched as a programmatic dependent (pdl.cuh)
  pdl_launch_dependents();
  const int nvec = C / K;
  Pack<T, K> w[VPT], na[VPT], nb[VPT];
  auto load_row = [&](int64_t row) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v >= nvec) continue;
      na[j] = load_pack<T, K>(a + row * C + v * K);
      if constexpr (kResidual) nb[j] = load_pack<T, K>(b + row * C + v * K);
    }
  };
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int v = threadIdx.x + j * blockDim.x;
    if (v < nvec) w[j] = load_pack<T, K>(weight + v * K);
  }
  if (blockIdx.x < N) load_row(blockIdx.x);
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const int64_t base = row * C;
    Pack<T, K> x[VPT], xb[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) x[j] = na[j], xb[j] = nb[j];
    if (row + gridDim.x < N) load_row(row + gridDim.x);
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v >= nvec) continue;
      if constexpr (kResidual) {
#pragma unroll
        for (int k = 0; k < K; ++k) x[j].v[k] = narrow<T>(widen(x[j].v[k]) + widen(xb[j].v[k]));
        store_pack(sum + base + v * K, x[j]);
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float f = widen(x[j].v[k]);
        ss += f * f;
      }
    }
    ss = block_sum(ss, smem);
    // As HF: variance (fp32) + eps, then the reciprocal square root in fp32.
    const float rs = 1.0f / sqrtf(ss / float(C) + eps);
    if (threadIdx.x == 0) rstd[row] = rs;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v >= nvec) continue;
      Pack<T, K> o;
#pragma unroll
      for (int k = 0; k < K; ++k) o.v[k] = narrow<T>((widen(x[j].v[k]) * rs) * widen(w[j].v[k]));
      store_pack(out + base + v * K, o);
    }
  }
}

// Rows [chunk * rows_per_chunk, ...) of CTA `chunk`:
//   g = rstd * (w*dout - x * rstd^2 * mean(w*dout*x)), stored to din
//   (kAccumulate: din += g, din read once and rounded once), and
//   partial[chunk, :] = sum over the chunk's rows, in row order, of dout * x * rstd.
// The next row's loads are issued before the current row's reduction.
template <class T, int K, int VPT, bool kAccumulate>
__global__ void __launch_bounds__(kMaxThreads) backward_kernel(T* din, float* partial, const T* dout, const T* in,
                                                      const T* weight, const float* rstd, int64_t N, int C,
                                                      int rows_per_chunk) {
  __shared__ float smem[32];
  const int nvec = C / K;
  Pack<T, K> w[VPT], ng[VPT], nx[VPT], nd[VPT];
  float acc[VPT][K];
  auto load_row = [&](int64_t row) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v >= nvec) continue;
      ng[j] = load_pack<T, K>(dout + row * C + v * K);
      nx[j] = load_pack<T, K>(in + row * C + v * K);
      if constexpr (kAccumulate) nd[j] = load_pack<T, K>(din + row * C + v * K);
    }
  };
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int v = threadIdx.x + j * blockDim.x;
    if (v < nvec) w[j] = load_pack<T, K>(weight + v * K);
#pragma unroll
    for (int k = 0; k < K; ++k) acc[j][k] = 0.0f;
  }
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  if (r0 < r1) load_row(r0);
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t base = row * C;
    Pack<T, K> g[VPT], x[VPT], d[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) g[j] = ng[j], x[j] = nx[j], d[j] = nd[j];
    if (row + 1 < r1) load_row(row + 1);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v >= nvec) continue;
#pragma unroll
      for (int k = 0; k < K; ++k) dot += widen(w[j].v[k]) * widen(g[j].v[k]) * widen(x[j].v[k]);
    }
    dot = block_sum(dot, smem);
    const float rs = rstd[row];
    const float coef = rs * rs * rs * (dot / float(C));
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int v = threadIdx.x + j * blockDim.x;
      if (v >= nvec) continue;
      Pack<T, K> o;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float gv = widen(g[j].v[k]), xv = widen(x[j].v[k]);
        float dx = rs * (widen(w[j].v[k]) * gv) - coef * xv;
        if constexpr (kAccumulate) dx += widen(d[j].v[k]);
        o.v[k] = narrow<T>(dx);
        acc[j][k] += gv * xv * rs;
      }
      store_pack(din + base + v * K, o);
    }
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int v = threadIdx.x + j * blockDim.x;
    if (v >= nvec) continue;
    Pack<float, K> p;
#pragma unroll
    for (int k = 0; k < K; ++k) p.v[k] = acc[j][k];
    store_pack(partial + int64_t(blockIdx.x) * C + v * K, p);
  }
}

// dweight[c] += sum over chunks of partial[chunk, c]: thread (x, y) of a
// 32 x 32 CTA sums chunks y, y + 32, ... of column 32 * blockIdx.x + x, then
// row y = 0 adds the 32 sums in order. (static: this header is included by
// two files.)
constexpr int kColumnSumSide = 32;  // column_sum_kernel's CTA: kColumnSumSide x kColumnSumSide threads
static __global__ void __launch_bounds__(kColumnSumSide * kColumnSumSide) column_sum_kernel(float* dweight,
                                                                                            const float* partial,
                                                                                            int chunks, int C) {
  __shared__ float s[32][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  float v = 0.0f;
  if (col < C) {
#pragma unroll 8
    for (int c = threadIdx.y; c < chunks; c += 32) v += partial[int64_t(c) * C + col];
  }
  s[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float t = 0.0f;
    for (int y = 0; y < 32; ++y) t += s[y][threadIdx.x];
    dweight[col] += t;
  }
}

// The element path (rows that are not whole 16-byte packs, or unaligned
// pointers): one CTA per row as above, each thread strides over the row;
// the forward reads its row twice (the second time from cache), the
// backward keeps its dweight partial in the partial row itself (each column
// belongs to one thread).
template <class T, bool kResidual>
__global__ void __launch_bounds__(kMaxThreads) forward_scalar_kernel(T* out, float* rstd, T* sum, const T* a, const T* b,
                                                             const T* weight, int64_t N, int C, float eps) {
  __shared__ float smem[32];
  pdl_wait();  // launched as a programmatic dependent (pdl.cuh)
  pdl_launch_dependents();
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const int64_t base = row * C;
    const T* x = kResidual ? sum + base : a + base;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float f;
      if constexpr (kResidual) {
        const T v = narrow<T>(widen(a[base + c]) + widen(b[base + c]));
        sum[base + c] = v;
        f = widen(v);
      } else {
        f = widen(x[c]);
      }
      ss += f * f;
    }
    ss = block_sum(ss, smem);
    const float rs = 1.0f / sqrtf(ss / float(C) + eps);
    if (threadIdx.x == 0) rstd[row] = rs;
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[base + c] = narrow<T>((widen(x[c]) * rs) * widen(weight[c]));
  }
}

template <class T, bool kAccumulate>
__global__ void __launch_bounds__(kMaxThreads) backward_scalar_kernel(T* din, float* partial, const T* dout, const T* in,
                                                              const T* weight, const float* rstd, int64_t N, int C,
                                                              int rows_per_chunk) {
  __shared__ float smem[32];
  float* part = partial + int64_t(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) part[c] = 0.0f;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t base = row * C;
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
      dot += widen(weight[c]) * widen(dout[base + c]) * widen(in[base + c]);
    dot = block_sum(dot, smem);
    const float rs = rstd[row];
    const float coef = rs * rs * rs * (dot / float(C));
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float gv = widen(dout[base + c]), xv = widen(in[base + c]);
      float dx = rs * (widen(weight[c]) * gv) - coef * xv;
      if constexpr (kAccumulate) dx += widen(din[base + c]);
      din[base + c] = narrow<T>(dx);
      part[c] += gv * xv * rs;
    }
  }
}

// Threads per row and packs per thread for a row of `nvec` 16-byte packs:
// at most 256 threads (so that __launch_bounds__(kMaxThreads) leaves registers for
// the row) and 4 packs each, so up to 1024 packs (bf16: C <= 8192); longer
// rows take the element path.
constexpr int64_t kMaxWidePacks = 1024;
struct RowShape {
  int vpt;
  int threads;
};
inline RowShape row_shape(int64_t nvec) {
  for (int vpt : {1, 2, 4}) {
    const int64_t t = (nvec + vpt - 1) / vpt;
    if (t <= kMaxThreads) return {vpt, int((t + 31) / 32 * 32)};
  }
  DAPO_FAIL("rmsnorm: a row of ", nvec, " 16-byte packs is longer than one CTA holds");
}

template <class F>
void with_vpt(int vpt, F&& f) {
  switch (vpt) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

// Whether every pointer is 16-byte aligned and a row is whole 16-byte
// packs, few enough for one CTA's registers.
template <class T>
bool wide_rows(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % kWidePack<T> != 0 || C / kWidePack<T> > kMaxWidePacks) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

// A grid of resident CTAs that loops over rows (keeps the weight in
// registers instead of re-reading it per row).
template <class Kernel>
unsigned resident_grid(Kernel kernel, int threads, int64_t rows) {
  int per_sm = 0;
  DAPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  const int64_t resident = int64_t(sm_count()) * (per_sm > 0 ? per_sm : 1);
  return unsigned(rows < resident ? rows : resident);
}

template <class T, bool kResidual>
void forward(const Ctx& ctx, T* out, float* rstd, T* sum, const T* a, const T* b, const T* weight, int64_t N,
             int64_t C, float eps) {
  if (N == 0) return;
  const bool wide = kResidual ? wide_rows<T>(C, {out, sum, a, b, weight}) : wide_rows<T>(C, {out, a, weight});
  if (!wide) {
    auto kernel = forward_scalar_kernel<T, kResidual>;
    DAPO_CUDA_CHECK(launch_pdl(kernel, resident_grid(kernel, kMaxThreads, N), kMaxThreads, 0, stream_of(ctx), out, rstd, sum, a, b,
                               weight, N, int(C), eps));
    return;
  }
  constexpr int K = kWidePack<T>;
  const RowShape rs = row_shape(C / K);
  with_vpt(rs.vpt, [&](auto vpt) {
    auto kernel = forward_kernel<T, K, decltype(vpt)::value, kResidual>;
    DAPO_CUDA_CHECK(launch_pdl(kernel, resident_grid(kernel, rs.threads, N), rs.threads, 0, stream_of(ctx), out, rstd,
                               sum, a, b, weight, N, int(C), eps));
  });
}

template <class T, bool kAccumulate>
void backward(const Ctx& ctx, T* din, float* dweight, const T* dout, const T* in, const T* weight, const float* rstd,
              int64_t N, int64_t C) {
  if (N == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "rmsnorm backward on CUDA needs ctx.scratch");
  // The chunking depends on N only, so dweight has the same bits on any GPU.
  const int64_t rows_per_chunk = (N + kMaxChunks - 1) / kMaxChunks;
  const int64_t chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  ArenaScope scope(*ctx.scratch);
  float* partial = ctx.scratch->alloc_array<float>(size_t(chunks * C));
  if (!wide_rows<T>(C, {din, dout, in, weight})) {
    backward_scalar_kernel<T, kAccumulate><<<unsigned(chunks), kMaxThreads, 0, stream_of(ctx)>>>(
        din, partial, dout, in, weight, rstd, N, int(C), int(rows_per_chunk));
    DAPO_CUDA_CHECK_LAUNCH();
  } else {
    constexpr int K = kWidePack<T>;
    const RowShape rs = row_shape(C / K);
    with_vpt(rs.vpt, [&](auto vpt) {
      backward_kernel<T, K, decltype(vpt)::value, kAccumulate><<<unsigned(chunks), rs.threads, 0, stream_of(ctx)>>>(
          din, partial, dout, in, weight, rstd, N, int(C), int(rows_per_chunk));
      DAPO_CUDA_CHECK_LAUNCH();
    });
  }
  column_sum_kernel<<<unsigned((C + kColumnSumSide - 1) / kColumnSumSide), dim3(kColumnSumSide, kColumnSumSide), 0,
                      stream_of(ctx)>>>(dweight, partial, int(chunks),
                                                                                 int(C));
  DAPO_CUDA_CHECK_LAUNCH();
}

}  // namespace dapo::ops::cuda::detail::norm
