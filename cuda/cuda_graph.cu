// CapturedGraph (include/dapo/ops/cuda_graph.h) over the CUDA graph API.
#include "common.cuh"
#include "dapo/ops/cuda_graph.h"

namespace dapo::ops {

CapturedGraph::~CapturedGraph() {
  // Not checked: a destructor may run while an error is being reported.
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& other) noexcept {
  if (this != &other) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

CapturedGraph CapturedGraph::capture(const Ctx& ctx, const std::function<void()>& body) {
  DAPO_CHECK(ctx.backend == Backend::cuda, "CapturedGraph: a CUDA ctx is needed");
  const cudaStream_t stream = cuda_detail::stream_of(ctx);
  // Thread-local mode: other threads (the watchdog) may make CUDA calls
  // that are unsafe during a global capture without being part of it.
  DAPO_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  body();
  cudaGraph_t graph = nullptr;
  DAPO_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  DAPO_CUDA_CHECK(err);
  CapturedGraph g;
  g.exec_ = exec;
  return g;
}

void CapturedGraph::launch(const Ctx& ctx) const {
  DAPO_CHECK(exec_ != nullptr, "CapturedGraph: launch of an empty graph");
  DAPO_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cuda_detail::stream_of(ctx)));
}

}  // namespace dapo::ops
