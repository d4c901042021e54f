// CUDA dense matrix products through cuBLASLt: fp32 accumulation of bf16 (or
// f32) operands, plans cached per shape (gemm_plan_cache.cu). Row-major
// tensors go to cuBLASLt's column-major world without copies: row-major C
// (M x N) is column-major C^T (N x M) = op(B)^T op(A)^T, so cuBLASLt's A is
// our b and its B our a. Besides the GEMM: a fixed-order two-stage column
// sum for the bias gradient, and two elementwise kernels for the cases the
// GEMM cannot take (K == 0, a bias the epilogue cannot add). Segments of a
// linear_forward_multi call that share a shape (gate and up, k and v) run as
// one strided-batched product over the shared input.
#include <cstdint>
#include <span>

#include "dapo/ops/matmul.h"
#include "gemm/gemm_plan_cache.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/gemm/gemv.h"
#include "runtime/libraries.h"
#include "src/ops/backend_shared.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

// ---- kernels -------------------------------------------------------------------

// Threads of a block of the two elementwise kernels (grid-stride loops).
constexpr int kElementwiseThreads = 256;

// c = beta * c; exactly 0 when beta == 0, whatever c held (NaN included).
template <class T>
__global__ void scale_kernel(T* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(c, i, beta == 0.0f ? 0.0f : beta * load_f32(c, i));
}

// out (rows, cols) = bias (cols) on every row.
template <class TO, class TB>
__global__ void broadcast_rows_kernel(TO* out, const TB* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(out, i, load_f32(bias, i % cols));
}

// Bias gradient, stage 1: the column sums of one chunk of kSumRows rows.
// Block (kSumCols, kSumLanes): x picks V adjacent columns, y a row lane; each lane
// walks its rows in order, then lane sums are added in lane order. The chunking
// is a function of the shape only, so the result does not depend on the launch.
constexpr int kSumRows = 64;
constexpr int kSumCols = 32;  // a block's x: one warp over adjacent columns
constexpr int kSumLanes = 8;
constexpr int kFinalLanes = 32;

template <int V>
__device__ __forceinline__ void load_row_vec(const float* p, float (&v)[V]) {
  if constexpr (V == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    static_assert(V == 1, "f32 rows load 1 or 4 values");
    v[0] = *p;
  }
}
template <int V>
__device__ __forceinline__ void load_row_vec(const __nv_bfloat16* p, float (&v)[V]) {
  if constexpr (V == 8) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&q);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(h[j]);
      v[2 * j] = f.x, v[2 * j + 1] = f.y;
    }
  } else {
    static_assert(V == 1, "bf16 rows load 1 or 8 values");
    v[0] = __bfloat162float(*p);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kSumCols * kSumLanes) column_sum_partial_kernel(float* partial, const T* x, int64_t rows,
                                                                             int64_t cols) {
  __shared__ float lane_sums[kSumLanes][kSumCols * V];
  const int64_t chunk = blockIdx.x;
  const int64_t col = (int64_t(blockIdx.y) * kSumCols + threadIdx.x) * V;
  const int64_t r_end = min(rows, (chunk + 1) * kSumRows);
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  if (col < cols) {
    for (int64_t r = chunk * kSumRows + threadIdx.y; r < r_end; r += kSumLanes) {
      float v[V];
      load_row_vec<V>(x + r * cols + col, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) lane_sums[threadIdx.y][threadIdx.x * V + j] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float s = 0.0f;
#pragma unroll
      for (int l = 0; l < kSumLanes; ++l) s += lane_sums[l][threadIdx.x * V + j];
      partial[chunk * cols + col + j] = s;  // V > 1 only when cols % V == 0
    }
  }
}

// Stage 2: dbias[c] += sum over chunks of partial[chunk][c], chunks split
// over kFinalLanes lanes in a fixed pattern and the lanes added in order.
__global__ void __launch_bounds__(kSumCols * kFinalLanes) column_sum_final_kernel(float* dbias, const float* partial,
                                                                             int64_t chunks, int64_t cols) {
  __shared__ float lane_sums[kFinalLanes][kSumCols + 1];
  const int64_t col = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  float acc = 0.0f;
  if (col < cols)
    for (int64_t ch = threadIdx.y; ch < chunks; ch += kFinalLanes) acc += partial[ch * cols + col];
  lane_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float s = 0.0f;
#pragma unroll
    for (int l = 0; l < kFinalLanes; ++l) s += lane_sums[l][threadIdx.x];
    dbias[col] += s;
  }
}

// ---- launchers (raw pointers, sizes, stream; return the launch status) -------

template <class T>
cudaError_t launch_scale(T* c, int64_t n, float beta, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<grid_for(n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(c, n, beta);
  return cudaGetLastError();
}

template <class TO, class TB>
cudaError_t launch_broadcast_rows(TO* out, const TB* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  broadcast_rows_kernel<<<grid_for(n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(out, bias, rows, cols);
  return cudaGetLastError();
}

template <class T, int V>
cudaError_t launch_column_sum(float* dbias, float* partial, const T* x, int64_t rows, int64_t cols,
                              cudaStream_t stream) {
  const int64_t chunks = (rows + kSumRows - 1) / kSumRows;
  const int64_t col_tiles = (cols + kSumCols * V - 1) / (kSumCols * V);
  if (chunks == 0 || cols == 0) return cudaSuccess;
  if (chunks > INT32_MAX || col_tiles > 65535) return cudaErrorInvalidConfiguration;
  column_sum_partial_kernel<T, V><<<dim3(unsigned(chunks), unsigned(col_tiles)), dim3(kSumCols, kSumLanes), 0, stream>>>(
      partial, x, rows, cols);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t final_blocks = (cols + kSumCols - 1) / kSumCols;
  if (final_blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  column_sum_final_kernel<<<unsigned(final_blocks), dim3(kSumCols, kFinalLanes), 0, stream>>>(dbias, partial, chunks, cols);
  return cudaGetLastError();
}

// ---- host helpers ----------------------------------------------------------------

__nv_bfloat16* bf16_ptr(const Tensor& t) { return static_cast<__nv_bfloat16*>(t.data); }

cudaDataType_t cuda_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Largest power of two dividing the address, at most 16 (see GemmKey).
uint8_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint8_t al = 16;
  while (al > 1 && v % al != 0) al /= 2;
  return al;
}

void scale(const Ctx& ctx, const Tensor& c, float beta) {
  if (c.dtype == DType::f32)
    DAPO_CUDA_CHECK(launch_scale(c.ptr<float>(), c.numel(), beta, stream_of(ctx)));
  else
    DAPO_CUDA_CHECK(launch_scale(bf16_ptr(c), c.numel(), beta, stream_of(ctx)));
}

void broadcast_rows(const Ctx& ctx, const Tensor& out, const Tensor& bias) {
  const int64_t rows = out.shape[0], cols = out.shape[1];
  const cudaStream_t s = stream_of(ctx);
  if (out.dtype == DType::f32 && bias.dtype == DType::f32)
    DAPO_CUDA_CHECK(launch_broadcast_rows(out.ptr<float>(), bias.ptr<float>(), rows, cols, s));
  else if (out.dtype == DType::f32)
    DAPO_CUDA_CHECK(launch_broadcast_rows(out.ptr<float>(), bf16_ptr(bias), rows, cols, s));
  else if (bias.dtype == DType::f32)
    DAPO_CUDA_CHECK(launch_broadcast_rows(bf16_ptr(out), bias.ptr<float>(), rows, cols, s));
  else
    DAPO_CUDA_CHECK(launch_broadcast_rows(bf16_ptr(out), bf16_ptr(bias), rows, cols, s));
}

// A strided batch of `count` products of one shape: product i reads the
// matrices i * a and i * b elements past a's and b's data and the bias i *
// bias elements past the bias, and writes c's data + i * c elements. No
// stride is negative; 0 shares one matrix or bias among the products.
struct GemmBatch {
  int count = 1;
  int64_t a = 0, b = 0, c = 0, bias = 0;
};

// The plan for c (M, N) = alpha * op(a) @ op(b) + beta * c [+ bias (N) on
// every row], all row-major and dense, M, N, K > 0, `batch.count` times.
const GemmPlan* gemm_plan(const Ctx& ctx, const Tensor& c, const Tensor& a, const Tensor& b, int64_t M, int64_t N,
                          int64_t K, bool trans_a, bool trans_b, const void* bias, const GemmBatch& batch) {
  GemmKey key;
  key.m = N;
  key.n = M;
  key.k = K;
  key.trans_a = trans_b;
  key.trans_b = trans_a;
  key.ab_type = cuda_type(a.dtype);
  key.cd_type = cuda_type(c.dtype);
  key.bias_epilogue = bias != nullptr;
  key.align_a = alignment(b.data);
  key.align_b = alignment(a.data);
  key.align_c = alignment(c.data);
  key.align_bias = bias != nullptr ? alignment(bias) : 16;
  key.batch_invariant = ctx.batch_invariant;
  if (batch.count > 1) {
    key.batch = batch.count;
    key.stride_a = batch.b;
    key.stride_b = batch.a;
    key.stride_c = batch.c;
    key.stride_bias = bias != nullptr ? batch.bias : 0;
  }
  return gemm_plan_get(ctx.libraries->gemm_plans, ctx.libraries->cublaslt, key,
                       ctx.libraries->workspace_bytes, bias);
}

// c_in: cuBLASLt's C where it is not D (c), of c's shape and dtype, at
// least as aligned as the plan's key says.
void gemm_run(const Ctx& ctx, const GemmPlan* plan, const Tensor& c, const Tensor& a, const Tensor& b, float alpha,
              float beta, const void* bias, const void* c_in = nullptr) {
  if (bias != nullptr)
    DAPO_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const void* c_read = c_in != nullptr ? c_in : c.data;
  DAPO_CUBLAS_CHECK(cublasLtMatmul(ctx.libraries->cublaslt, plan->desc, &alpha, b.data, plan->a,
                                   a.data, plan->b, &beta, c_read, plan->c, c.data, plan->c, &plan->algo,
                                   ctx.libraries->workspace, ctx.libraries->workspace_bytes, stream_of(ctx)));
}

// One product as gemm_plan describes it (no batch). Returns false only when a
// bias was asked for and cuBLASLt has no algorithm with the bias epilogue for
// this case.
bool gemm(const Ctx& ctx, const Tensor& c, const Tensor& a, const Tensor& b, int64_t M, int64_t N, int64_t K,
          bool trans_a, bool trans_b, float alpha, float beta, const void* bias) {
  const GemmPlan* plan = gemm_plan(ctx, c, a, b, M, N, K, trans_a, trans_b, bias, GemmBatch{});
  if (!plan->found) {
    DAPO_CHECK(bias != nullptr, "cuBLASLt has no algorithm for a ", dtype_name(a.dtype), " GEMM into ",
               dtype_name(c.dtype), ", M ", M, " N ", N, " K ", K, " trans ", trans_a, trans_b,
               " (heuristic status ", int(plan->status), ")");
    return false;
  }
  gemm_run(ctx, plan, c, a, b, alpha, beta, bias);
  return true;
}

template <class T>
void column_sum(const Ctx& ctx, const Tensor& dbias, const Tensor& x) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  DAPO_CHECK(ctx.scratch != nullptr, "linear_backward: the bias gradient needs ctx.scratch");
  ArenaScope scope(*ctx.scratch);
  const int64_t chunks = (rows + kSumRows - 1) / kSumRows;
  float* partial = ctx.scratch->alloc_array<float>(size_t(chunks * cols));
  const T* xp = static_cast<const T*>(x.data);
  constexpr int kVec = sizeof(T) == 2 ? 8 : 4;  // 16-byte loads
  const bool vec = cols % kVec == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0;
  const cudaError_t e = vec ? launch_column_sum<T, kVec>(dbias.ptr<float>(), partial, xp, rows, cols, stream_of(ctx))
                            : launch_column_sum<T, 1>(dbias.ptr<float>(), partial, xp, rows, cols, stream_of(ctx));
  DAPO_CUDA_CHECK(e);
}

}  // namespace

// The contract (dtypes, shapes, aliasing) is checked by ops::matmul, and by
// ops::linear_backward for the products it runs here.
void matmul(const Ctx& ctx, Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta) {
  const int64_t M = c.shape[0], N = c.shape[1];
  const int64_t K = trans_a ? a.shape[0] : a.shape[1];
  if (M == 0 || N == 0) return;
  if (K == 0) return scale(ctx, c, beta);  // an empty sum: cuBLASLt needs k >= 1
  gemm(ctx, c, a, b, M, N, K, trans_a, trans_b, alpha, beta, nullptr);
}

namespace {

// linear_forward on cuBLASLt over checked arguments.
void cublaslt_forward(const Ctx& ctx, const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias) {
  const bool has_bias = bias.defined();
  const int64_t N = in.shape[0], I = in.shape[1], O = weight.shape[0];
  if (N == 0 || O == 0) return;
  if (I == 0) return has_bias ? broadcast_rows(ctx, out, bias) : scale(ctx, out, 0.0f);
  // The epilogue reads the bias in D's type; otherwise (or if cuBLASLt has no
  // epilogue kernel for the case) seed out with the bias and accumulate onto it.
  if (has_bias && bias.dtype == out.dtype &&
      gemm(ctx, out, in, weight, N, O, I, false, true, 1.0f, 0.0f, bias.data))
    return;
  if (has_bias) broadcast_rows(ctx, out, bias);
  gemm(ctx, out, in, weight, N, O, I, false, true, 1.0f, has_bias ? 1.0f : 0.0f, nullptr);
}

}  // namespace

// The contract is checked by ops::linear_forward (or the op that calls this
// one: linear_residual_fold's product); bf16 products of few rows go to the
// small-batch or the skinny kernel where they take them.
void linear_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias) {
  const int64_t N = in.shape[0], I = in.shape[1], O = weight.shape[0];
  if (N == 0 || O == 0) return;
  if (in.dtype == DType::bf16 && I > 0) {
    const LinearSegment seg{out, weight, bias};
    if (detail::linear_forward_few_rows(ctx, in, std::span<const LinearSegment>(&seg, 1))) return;
  }
  cublaslt_forward(ctx, out, in, weight, bias);
}

// The contract is checked by ops::linear_residual_forward.
void linear_residual_forward(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor res) {
  const int64_t N = in.shape[0], I = in.shape[1], O = weight.shape[0];
  if (N == 0 || O == 0) return;
  if (I == 0) {  // an empty product: out = res
    if (res.data != out.data)
      DAPO_CUDA_CHECK(cudaMemcpyAsync(out.data, res.data, out.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    return;
  }
  // The plan's key takes C's alignment from the less aligned of C and D
  // (they share one layout).
  const Tensor& c_key = alignment(res.data) < alignment(out.data) ? res : out;
  const GemmPlan* plan = gemm_plan(ctx, c_key, in, weight, N, O, I, false, true, nullptr, GemmBatch{});
  DAPO_CHECK(plan->found, "cuBLASLt has no algorithm for a ", dtype_name(in.dtype), " GEMM into ",
             dtype_name(out.dtype), ", M ", N, " N ", O, " K ", I, " (heuristic status ", int(plan->status), ")");
  gemm_run(ctx, plan, out, in, weight, 1.0f, 1.0f, nullptr, res.data);
}

// A tuning entry (tests call it past ops::linear_forward): the tensors'
// device, then the op's contract.
void detail::linear_forward_cublaslt(const Ctx& ctx, Tensor out, Tensor in, Tensor weight, Tensor bias) {
  check_device(ctx, out, "out");
  check_device(ctx, in, "in");
  check_device(ctx, weight, "weight");
  if (bias.defined()) check_device(ctx, bias, "bias");
  ops::detail::check_linear_forward("linear_forward", out, in, weight, bias);
  cublaslt_forward(ctx, out, in, weight, bias);
}

namespace {

// The step from p to q in whole elements of `elem` bytes; false when q - p
// is not a multiple of elem.
bool element_step(const void* p, const void* q, size_t elem, int64_t& step) {
  const int64_t d = int64_t(reinterpret_cast<uintptr_t>(q) - reinterpret_cast<uintptr_t>(p));
  if (d % int64_t(elem) != 0) return false;
  step = d / int64_t(elem);
  return true;
}

// Whether s can share a strided batch with s0: the same weight shape and
// dtypes, a bias in both or neither, and each pointer as aligned as s0's
// (so one key's alignment holds for every product of the batch).
bool batch_compatible(const LinearSegment& s0, const LinearSegment& s) {
  if (s.weight.ndim != 2 || s.weight.shape[0] != s0.weight.shape[0] || s.weight.shape[1] != s0.weight.shape[1])
    return false;
  if (s.weight.dtype != s0.weight.dtype || s.out.dtype != s0.out.dtype) return false;
  if (s.bias.defined() != s0.bias.defined()) return false;
  if (alignment(s.weight.data) != alignment(s0.weight.data) || alignment(s.out.data) != alignment(s0.out.data))
    return false;
  return !s0.bias.defined() || (s.bias.dtype == s0.bias.dtype && alignment(s.bias.data) == alignment(s0.bias.data));
}

}  // namespace

// Over checked arguments (linear_multi.cu's cuBLASLt path).
int detail::linear_forward_cublaslt_batched(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments) {
  // A batch-invariant product is one plain product (gemm_plan_cache.cuh).
  if (segments.size() < 2 || in.ndim != 2 || ctx.batch_invariant) return 0;
  const LinearSegment& s0 = segments[0];
  if (s0.weight.ndim != 2) return 0;
  const int64_t M = in.shape[0], K = in.shape[1], N = s0.weight.shape[0];
  if (M == 0 || N == 0 || K == 0) return 0;  // no product to run: linear_forward_cublaslt's job
  const bool has_bias = s0.bias.defined();
  const size_t w_elem = dtype_size(s0.weight.dtype), o_elem = dtype_size(s0.out.dtype);
  const size_t b_elem = has_bias ? dtype_size(s0.bias.dtype) : 1;
  // The longest run of segments from the first that match it and step
  // through memory by one weight, one output and one bias stride.
  GemmBatch step;  // step.a stays 0: every product reads the one input
  size_t n = 1;
  for (; n < segments.size(); ++n) {
    const LinearSegment &prev = segments[n - 1], &s = segments[n];
    if (!batch_compatible(s0, s)) break;
    GemmBatch d;
    if (!element_step(prev.weight.data, s.weight.data, w_elem, d.b) ||
        !element_step(prev.out.data, s.out.data, o_elem, d.c) ||
        (has_bias && !element_step(prev.bias.data, s.bias.data, b_elem, d.bias)))
      break;
    if (n > 1 && (d.b != step.b || d.c != step.c || d.bias != step.bias)) break;
    step = d;
  }
  if (n < 2) return 0;
  const std::span<const LinearSegment> run = segments.first(n);
  // Outputs do not overlap, so their stride is not 0; run the batch in the
  // order in which the outputs ascend, and only if the weights and biases
  // ascend (or repeat) in that order too: no negative strides (gemm_plan_cache.cuh).
  const bool reversed = step.c < 0;
  if (reversed) step.b = -step.b, step.c = -step.c, step.bias = -step.bias;
  if (step.b < 0 || step.bias < 0) return 0;
  step.count = int(n);
  const LinearSegment& first = reversed ? run.back() : run.front();
  // As linear_forward_cublaslt: a bias of out's dtype in the epilogue, else
  // (or when cuBLASLt has no such kernel) the bias broadcast into each output
  // and the products accumulated onto it.
  if (has_bias && first.bias.dtype == first.out.dtype) {
    const GemmPlan* plan = gemm_plan(ctx, first.out, in, first.weight, M, N, K, false, true, first.bias.data, step);
    if (plan->found) {
      gemm_run(ctx, plan, first.out, in, first.weight, 1.0f, 0.0f, first.bias.data);
      return int(n);
    }
  }
  const GemmPlan* plan = gemm_plan(ctx, first.out, in, first.weight, M, N, K, false, true, nullptr, step);
  if (!plan->found) return 0;
  if (has_bias)
    for (const LinearSegment& s : run) broadcast_rows(ctx, s.out, s.bias);
  gemm_run(ctx, plan, first.out, in, first.weight, 1.0f, has_bias ? 1.0f : 0.0f, nullptr);
  return int(n);
}

// The contract is checked by ops::linear_backward; the bias gradient's
// partial sums need ctx.scratch.
void linear_backward(const Ctx& ctx_in, Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                     Tensor weight) {
  // Gradients need no batch invariance (nothing compares them with a
  // sampler's): the heuristic's own choices.
  Ctx ctx = ctx_in;
  ctx.batch_invariant = false;
  if (din.defined()) cuda::matmul(ctx, din, dout, weight, false, false, 1.0f, 0.0f);  // (N,O) @ (O,I)
  cuda::matmul(ctx, dweight, dout, in, true, false, 1.0f, 1.0f);                     // (O,N) @ (N,I), +=
  if (dbias.defined()) {
    if (dout.dtype == DType::bf16) column_sum<__nv_bfloat16>(ctx, dbias, dout);
    else column_sum<float>(ctx, dbias, dout);
  }
}

}  // namespace dapo::ops::cuda
