// CUDA copy (include/dapo/ops/copy.h): one cudaMemcpyAsync on the ctx's
// stream; cudaMemcpyDefault lets unified addressing tell host from device.
#include "common.cuh"
#include "dapo/ops/copy.h"
#include "dapo/ops/op_profiler.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops::cuda {

void copy(const Ctx& ctx, Tensor dst, Tensor src) {
  if (dst.nbytes() == 0) return;
  const ProfileScope profile(ctx, "copy");
  DAPO_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDefault, cuda::detail::stream_of(ctx)));
}

void stream_synchronize(const Ctx& ctx) { DAPO_CUDA_CHECK(cudaStreamSynchronize(cuda::detail::stream_of(ctx))); }

void* event_create() {
  cudaEvent_t e = nullptr;
  DAPO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

void event_record(const Ctx& ctx, void* event) {
  DAPO_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), cuda::detail::stream_of(ctx)));
}

void event_synchronize(void* event) { DAPO_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

}  // namespace dapo::ops::cuda
