// Step I/O: a decode step's traffic between host and device done by
// kernels, so that it is part of the step's CUDA graph and a step is one
// graph launch. The three copies on the copy engine (metadata upload, fed
// tokens, read-back) sat between the graphs and cost the 0.5B step at
// batch 128 8-24 us of an H100's stream time (bench_decode_step_gpu's
// step_with_*_ms, on two days); a kernel reading or writing pinned host
// memory over the bus is one more node of the graph, launched as a
// programmatic dependent of the one before (engine step 1.370 -> 1.359 ms).
//
// A graph that captured step_in / step_out is re-targeted between replays
// by set_step_in / set_step_out (the host blocks take turns under the
// engine's launch-ahead), without capturing it again.
#pragma once

#include <cstdint>

#include "dapo/ops/context.h"
#include "dapo/ops/cuda_graph.h"

namespace dapo::ops {

// host: (n) i32 in pinned host memory (Arena::Pinned), the step's packed
//   metadata; read.
// device: (n) i32 on the ctx's device, its mirror: OVERWRITTEN with host,
//   except that
// tokens: a view into device (16-byte aligned within it, N >= fed_count
//   words) holding the step's input tokens, of which the first fed_count
//   become fed[0, fed_count) instead of their host value;
// fed: (>= fed_count) i32 on the device, the previous step's samples; read.
// capacity: the most words (n) the launch serves: its grid is sized from
//   it, so a captured graph's replays may move up to `capacity` words.
struct StepIn {
  Tensor host, device, tokens, fed;
  int64_t fed_count = 0;
  int64_t capacity = 0;  // >= n
};

// host: (n) i32 in pinned host memory, OVERWRITTEN with device (n) i32;
// capacity as for StepIn.
struct StepOut {
  Tensor host, device;
  int64_t capacity = 0;  // >= n
};

// CPU ctx: both are plain copies (host memory is the device's). CUDA ctx:
// one kernel each on the ctx's stream, launched as a programmatic dependent
// of the work before it; the host side must stay alive and untouched until
// the stream passes it (as for copy()).
void step_in(const Ctx& ctx, const StepIn& a);
void step_out(const Ctx& ctx, const StepOut& a);

// The graph's one step_in (step_out) kernel reads `a` from the next replay
// on; replays already enqueued keep their arguments. a.capacity must be the
// captured one. CUDA builds only.
void set_step_in(CapturedGraph& graph, const StepIn& a);
void set_step_out(CapturedGraph& graph, const StepOut& a);

}  // namespace dapo::ops
