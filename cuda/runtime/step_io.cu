// CUDA step I/O (include/dapo/ops/step_io.h): kernels that read and write
// pinned host memory over the bus (under unified addressing a cudaHostAlloc
// pointer is valid on the device as it is), one 16-byte vector a thread, so
// that a step's metadata arrives in one round trip of the bus.
#include <algorithm>

#include "common.cuh"
#include "ptx/pdl.cuh"
#include "dapo/ops/step_io.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {
namespace {

using namespace cuda::detail;

constexpr int kThreads = 256;

struct InArgs {
  const int32_t* host;
  int32_t* device;
  int64_t n;         // words
  int64_t tokens0;   // tokens' first word within device
  int64_t fed_count;
  const int32_t* fed;
};

struct OutArgs {
  int32_t* host;
  const int32_t* device;
  int64_t n;
};

// Thread t moves words [4t, 4t + 4): a 16-byte vector where all four exist.
__global__ void __launch_bounds__(kThreads) step_in_kernel(InArgs a) {
  const int64_t w0 = 4 * (int64_t(blockIdx.x) * kThreads + threadIdx.x);
  int32_t v[4] = {0, 0, 0, 0};
  // The host block is written by no kernel: it may be read before the wait.
  if (w0 + 4 <= a.n) {
    // .cv: fetched again at every replay, never from a cached line.
    const int4 x = __ldcv(reinterpret_cast<const int4*>(a.host + w0));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    for (int j = 0; j < 4; ++j)
      if (w0 + j < a.n) v[j] = __ldcv(a.host + w0 + j);
  }
  pdl_wait();
  pdl_launch_dependents();
  for (int j = 0; j < 4; ++j) {
    const int64_t r = w0 + j - a.tokens0;
    if (r >= 0 && r < a.fed_count) v[j] = a.fed[r];
  }
  if (w0 + 4 <= a.n) {
    *reinterpret_cast<int4*>(a.device + w0) = make_int4(v[0], v[1], v[2], v[3]);
  } else {
    for (int j = 0; j < 4; ++j)
      if (w0 + j < a.n) a.device[w0 + j] = v[j];
  }
}

__global__ void __launch_bounds__(kThreads) step_out_kernel(OutArgs a) {
  pdl_wait();
  const int64_t w0 = 4 * (int64_t(blockIdx.x) * kThreads + threadIdx.x);
  if (w0 + 4 <= a.n) {
    *reinterpret_cast<int4*>(a.host + w0) = *reinterpret_cast<const int4*>(a.device + w0);
  } else {
    for (int j = 0; j < 4; ++j)
      if (w0 + j < a.n) a.host[w0 + j] = a.device[w0 + j];
  }
}

unsigned grid_of(int64_t capacity) {
  return unsigned(std::max<int64_t>(1, (capacity + 4 * kThreads - 1) / (4 * kThreads)));
}

// The host side must be page-locked: a pageable pointer is not valid on the
// device and the kernel would fault far from the call.
void check_pinned(const Tensor& t, const char* what) {
  if (t.numel() == 0) return;
  cudaPointerAttributes attr{};
  DAPO_CUDA_CHECK(cudaPointerGetAttributes(&attr, t.data));
  DAPO_CHECK(attr.type == cudaMemoryTypeHost, what, ": the host tensor is not pinned memory (Arena::Pinned)");
}

InArgs in_args(const StepIn& a) {
  check_pinned(a.host, "step_in");
  InArgs k;
  k.host = static_cast<const int32_t*>(a.host.data);
  k.device = static_cast<int32_t*>(a.device.data);
  k.n = a.host.numel();
  k.tokens0 = a.tokens.numel() > 0 ? static_cast<const int32_t*>(a.tokens.data) - k.device : 0;
  k.fed_count = a.fed_count;
  k.fed = static_cast<const int32_t*>(a.fed.data);
  return k;
}

OutArgs out_args(const StepOut& a) {
  check_pinned(a.host, "step_out");
  return OutArgs{static_cast<int32_t*>(a.host.data), static_cast<const int32_t*>(a.device.data), a.device.numel()};
}

}  // namespace

void step_in(const Ctx& ctx, const StepIn& a) {
  InArgs k = in_args(a);
  DAPO_CUDA_CHECK(launch_pdl(step_in_kernel, dim3(grid_of(a.capacity)), dim3(kThreads), 0, stream_of(ctx), k));
}

void step_out(const Ctx& ctx, const StepOut& a) {
  OutArgs k = out_args(a);
  DAPO_CUDA_CHECK(launch_pdl(step_out_kernel, dim3(grid_of(a.capacity)), dim3(kThreads), 0, stream_of(ctx), k));
}

// The captured grid covers the captured capacity: more words than that
// would be left uncopied.
void set_step_in(CapturedGraph& graph, const StepIn& a) {
  InArgs k = in_args(a);
  void* args[] = {&k};
  const unsigned grid = graph.set_kernel_args(reinterpret_cast<const void*>(step_in_kernel), args);
  DAPO_CHECK(grid >= grid_of(a.capacity), "set_step_in: capacity ", a.capacity, " over the captured grid's");
}

void set_step_out(CapturedGraph& graph, const StepOut& a) {
  OutArgs k = out_args(a);
  void* args[] = {&k};
  const unsigned grid = graph.set_kernel_args(reinterpret_cast<const void*>(step_out_kernel), args);
  DAPO_CHECK(grid >= grid_of(a.capacity), "set_step_out: capacity ", a.capacity, " over the captured grid's");
}

}  // namespace dapo::ops::cuda
