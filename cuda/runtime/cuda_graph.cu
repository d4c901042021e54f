// CapturedGraph (include/dapo/ops/cuda_graph.h) over the CUDA graph API.
#include <vector>

#include "common.cuh"
#include "dapo/ops/cuda_graph.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops {

namespace {

// Not checked: a destructor may run while an error is being reported.
void destroy(void* exec, void* graph) {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (graph) cudaGraphDestroy(static_cast<cudaGraph_t>(graph));
}

}  // namespace

CapturedGraph::~CapturedGraph() { destroy(exec_, graph_); }

CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept
    : exec_(other.exec_), graph_(other.graph_), kernel_nodes_(std::move(other.kernel_nodes_)) {
  other.exec_ = other.graph_ = nullptr;
}

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& other) noexcept {
  if (this != &other) {
    destroy(exec_, graph_);
    exec_ = other.exec_;
    graph_ = other.graph_;
    kernel_nodes_ = std::move(other.kernel_nodes_);
    other.exec_ = other.graph_ = nullptr;
  }
  return *this;
}

CapturedGraph CapturedGraph::capture(const Ctx& ctx, const std::function<void()>& body) {
  DAPO_CHECK(ctx.backend == Backend::cuda, "CapturedGraph: a CUDA ctx is needed");
  const cudaStream_t stream = cuda::detail::stream_of(ctx);
  // Thread-local mode: other threads (the watchdog) may make CUDA calls
  // that are unsafe during a global capture without being part of it.
  DAPO_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  body();
  cudaGraph_t graph = nullptr;
  DAPO_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) cudaGraphDestroy(graph);
  DAPO_CUDA_CHECK(err);
  CapturedGraph g;
  g.exec_ = exec;
  g.graph_ = graph;
  return g;
}

void CapturedGraph::launch(const Ctx& ctx) const {
  DAPO_CHECK(exec_ != nullptr, "CapturedGraph: launch of an empty graph");
  DAPO_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cuda::detail::stream_of(ctx)));
}

unsigned CapturedGraph::set_kernel_args(const void* kernel, void** args) {
  DAPO_CHECK(exec_ != nullptr && graph_ != nullptr, "CapturedGraph: set_kernel_args on an empty graph");
  cudaGraphNode_t found = nullptr;
  for (const auto& [k, node] : kernel_nodes_)
    if (k == kernel) found = static_cast<cudaGraphNode_t>(node);
  if (found == nullptr) {
    // Once per kernel: a decode graph has a few hundred nodes.
    const cudaGraph_t graph = static_cast<cudaGraph_t>(graph_);
    size_t n = 0;
    DAPO_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    DAPO_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
    for (const cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      DAPO_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      if (type != cudaGraphNodeTypeKernel) continue;
      cudaKernelNodeParams p{};
      // Kernels of other modules (cuBLASLt's) have no runtime function to
      // report: not ours.
      const cudaError_t err = cudaGraphKernelNodeGetParams(node, &p);
      if (err == cudaErrorInvalidDeviceFunction) {
        (void)cudaGetLastError();
        continue;
      }
      DAPO_CUDA_CHECK(err);
      if (p.func != kernel) continue;
      DAPO_CHECK(found == nullptr, "CapturedGraph: set_kernel_args: the kernel runs in more than one node");
      found = node;
    }
    DAPO_CHECK(found != nullptr, "CapturedGraph: set_kernel_args: the graph has no node running the kernel");
    kernel_nodes_.emplace_back(kernel, found);
  }
  cudaKernelNodeParams params{};
  DAPO_CUDA_CHECK(cudaGraphKernelNodeGetParams(found, &params));
  params.kernelParams = args;
  params.extra = nullptr;
  DAPO_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(static_cast<cudaGraphExec_t>(exec_), found, &params));
  return params.gridDim.x;
}

}  // namespace dapo::ops
