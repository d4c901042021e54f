// CapturedGraph: the work one call enqueues on a ctx's stream, recorded
// once as a CUDA graph and replayed with one launch. The engine's decode
// steps are ~300 small kernels each; replaying them as a graph takes the
// host's per-launch cost out of the step. A replay reads and writes the
// same addresses the capture saw, with the same launch shapes: what
// changes between replays must be in device memory the graph reads (the
// engine's staged step metadata), never in a kernel argument, except
// through set_kernel_args (the ops that re-target their own kernel between
// replays use it: step_io.h).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "dapo/ops/context.h"

namespace dapo::ops {

class CapturedGraph {
 public:
  CapturedGraph() = default;
  ~CapturedGraph();
  CapturedGraph(CapturedGraph&& other) noexcept;
  CapturedGraph& operator=(CapturedGraph&& other) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Records what `body` enqueues on ctx's stream (nothing runs during the
  // capture) and instantiates it. CUDA ctx only; body must not synchronise
  // with the host, allocate device memory or use another stream.
  static CapturedGraph capture(const Ctx& ctx, const std::function<void()>& body);
  // Enqueues one replay on ctx's stream.
  void launch(const Ctx& ctx) const;
  bool valid() const { return exec_ != nullptr; }
  // The arguments of the graph's one kernel node that runs `kernel` (a
  // __global__ function's address; exactly one node must) become `args`
  // (as cudaLaunchKernel takes them) from the next launch on; launches
  // already enqueued keep theirs. Grid, block and shared memory stay;
  // returns the node's grid size (x), which the caller's arguments must fit.
  unsigned set_kernel_args(const void* kernel, void** args);

 private:
  void* exec_ = nullptr;   // cudaGraphExec_t
  void* graph_ = nullptr;  // cudaGraph_t it was instantiated from: set_kernel_args names its nodes
  std::vector<std::pair<const void*, void*>> kernel_nodes_;  // kernel -> its node, once looked up
};

}  // namespace dapo::ops
