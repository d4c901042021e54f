// Kernel-by-kernel GPU times of work launched inside CUDA graphs, from
// CUPTI's activity records (the op profiler's events cannot sit inside a
// graph, and put launch gaps of their own between the ops they time).
// Bench-only: the benches that include this link CUPTI when the toolkit has
// it (DAPO_WITH_CUPTI); without it KernelTrace::available() is false.
//
//   KernelTrace trace;            // before the graph is captured
//   ... capture, replay n steps ...
//   auto timeline = trace.collect(from, to);  // each kernel: calls, ns; idle ns
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#if defined(DAPO_WITH_CUPTI)
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include "dapo/core/error.h"
#endif

namespace dapo::bench {

struct TracedKernel {
  std::string name;  // demangled, without the parameter list
  int64_t calls = 0;
  // Start to end, summed. A kernel launched with PDL starts while its
  // predecessor runs and waits for it, so these overlap and can sum to
  // more than the step.
  double total_ns = 0;
  // The part of the timeline this kernel alone accounts for: from the
  // later of its start and the end of every kernel before it, to its end.
  // These and the idle gaps add up to the traced span exactly.
  double exclusive_ns = 0;
  // Idle time just before this kernel started (no kernel running): where
  // the launch gaps sit.
  double idle_before_ns = 0;
};

struct KernelTimeline {
  std::vector<TracedKernel> kernels;  // most exclusive time first
  double idle_ns = 0;                 // no kernel running, between the first start and the last end
  double span_ns = 0;                 // first start to last end
};

#if defined(DAPO_WITH_CUPTI)

#define DAPO_CUPTI_CHECK(call)                                                  \
  do {                                                                          \
    const CUptiResult r_ = (call);                                              \
    if (r_ != CUPTI_SUCCESS) {                                                  \
      const char* s_ = nullptr;                                                 \
      cuptiGetResultString(r_, &s_);                                            \
      DAPO_FAIL(std::string(#call) + " failed: " + (s_ ? s_ : "unknown error")); \
    }                                                                           \
  } while (0)

class KernelTrace {
 public:
  // Records every kernel that runs from now until collect(): construct it
  // after warm-up and before capturing the graphs to trace (CUPTI must be
  // on when a graph is instantiated for its nodes to report).
  // With `copies`, memory copies join the timeline too ("memcpy HtoD", ...).
  // With `by_grid`, launches of one kernel with different grids count
  // apart ("name [x,y,z]"): the products that share a GEMM kernel.
  explicit KernelTrace(bool copies = false, bool by_grid = false) : copies_(copies), by_grid_(by_grid) {
    DAPO_CUPTI_CHECK(cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed));
    DAPO_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    if (copies_) DAPO_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  }
  ~KernelTrace() {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (copies_) cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  }
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  static bool available() { return true; }

  // CUPTI's clock, to bound the records collect() keeps.
  static uint64_t now_ns() {
    uint64_t t = 0;
    DAPO_CUPTI_CHECK(cuptiGetTimestamp(&t));
    return t;
  }

  // Kernels that started in [from_ns, to_ns) on one stream, as a
  // timeline. Call after the stream has synchronised.
  KernelTimeline collect(uint64_t from_ns, uint64_t to_ns) {
    DAPO_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    std::vector<Record> rs;
    for (Record& r : records())
      if (r.start >= from_ns && r.start < to_ns) rs.push_back(std::move(r));
    records().clear();
    std::sort(rs.begin(), rs.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
    KernelTimeline t;
    std::map<std::string, TracedKernel> by_name;
    uint64_t busy_until = rs.empty() ? 0 : rs.front().start;
    for (const Record& r : rs) {
      const std::string key = by_grid_ && r.grid[0] > 0 ? r.name + " [" + std::to_string(r.grid[0]) + "," +
                                                              std::to_string(r.grid[1]) + "," +
                                                              std::to_string(r.grid[2]) + "]"
                                                        : r.name;
      TracedKernel& k = by_name[key];
      k.name = key;
      k.calls += 1;
      k.total_ns += double(r.end - r.start);
      if (r.start > busy_until) {
        t.idle_ns += double(r.start - busy_until);
        k.idle_before_ns += double(r.start - busy_until);
      }
      if (r.end > busy_until) k.exclusive_ns += double(r.end - std::max(r.start, busy_until));
      busy_until = std::max(busy_until, r.end);
    }
    if (!rs.empty()) t.span_ns = double(busy_until - rs.front().start);
    for (auto& [name, k] : by_name) t.kernels.push_back(std::move(k));
    std::sort(t.kernels.begin(), t.kernels.end(), [](const TracedKernel& a, const TracedKernel& b) {
      return a.exclusive_ns > b.exclusive_ns;
    });
    return t;
  }

 private:
  struct Record {
    std::string name;
    uint64_t start, end;
    int32_t grid[3] = {0, 0, 0};  // a kernel's; zeros for a copy
  };
  bool copies_ = false, by_grid_ = false;
  // CUPTI's buffer callbacks take no user pointer: the records of the one
  // live trace sit here, filled on CUPTI's thread and read after the flush.
  static std::vector<Record>& records() {
    static std::vector<Record> r;
    return r;
  }

  static std::string short_name(const char* mangled) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
    std::string s = status == 0 && d ? d.get() : mangled;
    // Drop the parameter list (the template arguments name the variant) and
    // the namespaces every kernel of ours shares.
    const std::string anon = "(anonymous namespace)::";
    for (size_t at; (at = s.find(anon)) != std::string::npos;) s.erase(at, anon.size());
    int depth = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '<') ++depth;
      else if (s[i] == '>') --depth;
      else if (s[i] == '(' && depth == 0) {
        s.resize(i);
        break;
      }
    }
    for (const std::string prefix : {"void ", "dapo::ops::cuda::detail::", "dapo::ops::cuda::"})
      for (size_t at; (at = s.find(prefix)) != std::string::npos;) s.erase(at, prefix.size());
    return s;
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    constexpr size_t kBytes = size_t(8) << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
    *size = kBytes;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        records().push_back({short_name(k->name), k->start, k->end, {k->gridX, k->gridY, k->gridZ}});
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        const char* kind = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "HtoD"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "DtoH"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "DtoD"
                                                                            : "other";
        records().push_back({std::string("memcpy ") + kind, m->start, m->end});
      }
    }
    std::free(buffer);
  }
};

#else

class KernelTrace {
 public:
  explicit KernelTrace(bool = false, bool = false) {}
  static bool available() { return false; }
  static uint64_t now_ns() { return 0; }
  KernelTimeline collect(uint64_t, uint64_t) { return {}; }
};

#endif

}  // namespace dapo::bench
