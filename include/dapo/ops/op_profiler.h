// OpProfiler: where the GPU time of a step goes, op by op. When a Ctx
// carries one, every CUDA op dispatched through DAPO_DISPATCH is bracketed by
// two CUDA events on its stream; summary() waits for them and adds the
// intervals per op name. Events do not synchronise the host, so a profiled
// step runs as an unprofiled one does, plus ~2 event records per op. For
// benchmarks (bench_update_gpu); the hot path has no profiler (nullptr).
#pragma once

#include <string>
#include <vector>

namespace dapo::ops {

struct Ctx;

class OpProfiler {
 public:
  OpProfiler();
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void begin(const Ctx& ctx, const char* op);
  void end(const Ctx& ctx);
  // Queues a kernel on ctx's stream that spins for `ms` milliseconds. What
  // the host enqueues next waits behind it, so the ops then run back to back
  // and their events time GPU execution alone, without the host's launch
  // gaps (which a replayed CUDA graph does not have either). Keep `ms`
  // longer than the host takes to enqueue the profiled work.
  void hold(const Ctx& ctx, double ms);
  struct Entry {
    std::string op;
    int64_t calls = 0;
    double ms = 0;  // summed GPU time between the op's two events
  };
  // Waits for the recorded events; entries by descending time. Then
  // forgets them (the next summary covers what was recorded after).
  std::vector<Entry> summary();

 private:
  struct Impl;
  Impl* impl_;
};

// Brackets one op when ctx.profiler is set.
class ProfileScope {
 public:
  ProfileScope(const Ctx& ctx, const char* op);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const Ctx& ctx_;
};

}  // namespace dapo::ops
