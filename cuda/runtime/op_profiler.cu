// Per-op GPU time from CUDA events (op_profiler.h). Events come from a pool
// that grows as needed and is reused after each summary.
#include <algorithm>
#include <map>

#include "common.cuh"
#include "dapo/ops/op_profiler.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops {

struct OpProfiler::Impl {
  std::vector<cudaEvent_t> pool;  // 2 per recorded op
  std::vector<const char*> names;
  size_t used = 0;
  cudaEvent_t next() {
    if (used == pool.size()) {
      cudaEvent_t e;
      DAPO_CUDA_CHECK(cudaEventCreate(&e));
      pool.push_back(e);
    }
    return pool[used++];
  }
};

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

OpProfiler::OpProfiler() : impl_(new Impl) {}

void OpProfiler::hold(const Ctx& ctx, double ms) {
  DAPO_CHECK(ms >= 0 && ms < 60e3, "OpProfiler::hold: ", ms, " ms");
  hold_kernel<<<1, 1, 0, cuda::detail::stream_of(ctx)>>>(uint64_t(ms * 1e6));
  DAPO_CUDA_CHECK(cudaGetLastError());
}

OpProfiler::~OpProfiler() {
  for (cudaEvent_t e : impl_->pool) cudaEventDestroy(e);
  delete impl_;
}

void OpProfiler::begin(const Ctx& ctx, const char* op) {
  impl_->names.push_back(op);
  DAPO_CUDA_CHECK(cudaEventRecord(impl_->next(), cuda::detail::stream_of(ctx)));
}

void OpProfiler::end(const Ctx& ctx) { DAPO_CUDA_CHECK(cudaEventRecord(impl_->next(), cuda::detail::stream_of(ctx))); }

std::vector<OpProfiler::Entry> OpProfiler::summary() {
  std::map<std::string, Entry> by_op;
  for (size_t i = 0; i < impl_->names.size(); ++i) {
    cudaEvent_t a = impl_->pool[2 * i], b = impl_->pool[2 * i + 1];
    DAPO_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    DAPO_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    Entry& e = by_op[impl_->names[i]];
    e.op = impl_->names[i];
    e.calls += 1;
    e.ms += ms;
  }
  impl_->names.clear();
  impl_->used = 0;
  std::vector<Entry> out;
  for (auto& [_, e] : by_op) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const Entry& x, const Entry& y) { return x.ms > y.ms; });
  return out;
}

ProfileScope::ProfileScope(const Ctx& ctx, const char* op) : ctx_(ctx) {
  if (ctx.profiler) ctx.profiler->begin(ctx, op);
}

ProfileScope::~ProfileScope() {
  if (ctx_.profiler) ctx_.profiler->end(ctx_);
}

}  // namespace dapo::ops
