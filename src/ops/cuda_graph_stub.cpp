// CapturedGraph in builds without CUDA: nothing can be captured.
#ifndef DAPO_WITH_CUDA
#include "dapo/core/error.h"
#include "dapo/ops/cuda_graph.h"

namespace dapo::ops {

CapturedGraph::~CapturedGraph() = default;
CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept
    : exec_(other.exec_), graph_(other.graph_), kernel_nodes_(std::move(other.kernel_nodes_)) {
  other.exec_ = other.graph_ = nullptr;
}
CapturedGraph& CapturedGraph::operator=(CapturedGraph&& other) noexcept {
  exec_ = other.exec_;
  graph_ = other.graph_;
  kernel_nodes_ = std::move(other.kernel_nodes_);
  other.exec_ = other.graph_ = nullptr;
  return *this;
}
CapturedGraph CapturedGraph::capture(const Ctx&, const std::function<void()>&) {
  DAPO_FAIL("CapturedGraph: this build has no CUDA");
}
void CapturedGraph::launch(const Ctx&) const { DAPO_FAIL("CapturedGraph: this build has no CUDA"); }
unsigned CapturedGraph::set_kernel_args(const void*, void**) { DAPO_FAIL("CapturedGraph: this build has no CUDA"); }

}  // namespace dapo::ops
#endif
