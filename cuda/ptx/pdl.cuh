// Programmatic dependent launch (PDL, sm_90) for the short kernels of a
// decode step. A decode step of a small model is ~250 kernels of a few
// microseconds each; without PDL every one of them pays its launch and
// ramp-up after the previous one has drained. Launched with launch_pdl, a
// kernel's CTAs may become resident while the previous kernel still runs,
// and wait in pdl_wait() until its writes are visible.
//
// The rules every kernel launched with launch_pdl keeps:
//   - pdl_wait() runs in every CTA before it reads or writes global memory
//     that an earlier kernel touches (weights included: an AdamW step may
//     have written them), and before any early return: a grid whose CTAs all
//     returned without waiting would complete before its predecessor, and
//     the kernel after it would then read unfinished data.
//   - pdl_launch_dependents() may come any time after: the next kernel's CTAs
//     launch once every CTA of this grid has started (or exited), so they
//     only take SM slots this grid no longer needs.
// Every kernel but paged attention's (main and merge) calls
// pdl_launch_dependents() after its own pdl_wait(); so once a kernel runs,
// every grid before its predecessor has completed, unless that predecessor
// is paged attention. On that ground paged attention reads before its wait
// what no grid since its predecessor's predecessor writes: the step's block
// table and lengths, and the keys and values of the positions before the
// step's new ones.
// The small-batch products (gemm/gemv.cu) request their first weight
// pieces before their wait, on the same ground: no kernel that may still
// run then (their predecessor, or paged attention's predecessor) writes
// weights, and a kernel that writes them (AdamW, a cast) never calls
// pdl_launch_dependents(), so whatever follows it starts after it ends.
// Both instructions are no-ops for a kernel launched without the attribute.
// Results are unchanged: only when a kernel starts moves, not what it reads.
#pragma once

#include <utility>

#include "common.cuh"

namespace dapo::ops::cuda::detail {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic
// dependent of the work before it in the stream (or the graph being
// captured). Returns the launch status.
template <class... Params, class... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace dapo::ops::cuda::detail
