// Copy: bytes between host and device (or within one) in the backend's
// stream order. The generation engine stages each step's metadata to the
// GPU and reads the sampled tokens back with it; nothing else in the hot
// path crosses the bus.
#pragma once

#include "dapo/ops/context.h"

namespace dapo::ops {

// dst = src, element for element: the same dtype and element count (shapes
// may differ), not overlapping.
// CPU ctx: both tensors on the host; done when the call returns.
// CUDA ctx: each tensor on the host or the device; one cudaMemcpyAsync on
//   the ctx's stream, which returns before the copy is done. A host tensor
//   must stay alive and untouched until the stream is synchronised
//   (stream_synchronize); from pinned memory (Arena::Pinned) the copy is
//   truly asynchronous, from pageable memory the driver stages it.
void copy(const Ctx& ctx, Tensor dst, Tensor src);

// Waits until everything enqueued on the ctx's stream is done (CPU: returns).
void stream_synchronize(const Ctx& ctx);

// A point in a stream: record() marks what the ctx's stream holds so far,
// synchronize() waits until that is done, whatever was enqueued after it
// (the engine waits for step N's tokens while step N + 1 runs). CPU ctx:
// everything is done when enqueued, both return at once.
class StreamEvent {
 public:
  explicit StreamEvent(const Ctx& ctx);
  ~StreamEvent();
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  void record(const Ctx& ctx);
  void synchronize();

 private:
  void* event_ = nullptr;  // cudaEvent_t on the CUDA backend
};

}  // namespace dapo::ops
