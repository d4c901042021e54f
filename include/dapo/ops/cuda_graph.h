// CapturedGraph: the work one call enqueues on a ctx's stream, recorded
// once as a CUDA graph and replayed with one launch. The engine's decode
// steps are ~300 small kernels each; replaying them as a graph takes the
// host's per-launch cost out of the step. A replay reads and writes the
// same addresses the capture saw, with the same launch shapes: what
// changes between replays must be in device memory the graph reads (the
// engine's staged step metadata), never in a kernel argument.
#pragma once

#include <functional>

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

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

}  // namespace dapo::ops
