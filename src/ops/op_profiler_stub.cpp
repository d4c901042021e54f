// OpProfiler in builds without CUDA: there are no GPU events to time, so
// the GPU benchmarks that profile link but say so if they get that far
// (they stop earlier, finding no GPU).
#ifndef DAPO_WITH_CUDA
#include "dapo/core/error.h"
#include "dapo/ops/op_profiler.h"

namespace dapo::ops {

struct OpProfiler::Impl {};
OpProfiler::OpProfiler() : impl_(nullptr) {}
OpProfiler::~OpProfiler() = default;
void OpProfiler::begin(const Ctx&, const char*) { DAPO_FAIL("OpProfiler: this build has no CUDA"); }
void OpProfiler::end(const Ctx&) { DAPO_FAIL("OpProfiler: this build has no CUDA"); }
void OpProfiler::hold(const Ctx&, double) { DAPO_FAIL("OpProfiler: this build has no CUDA"); }
std::vector<OpProfiler::Entry> OpProfiler::summary() { DAPO_FAIL("OpProfiler: this build has no CUDA"); }
ProfileScope::ProfileScope(const Ctx& ctx, const char*) : ctx_(ctx) {}
ProfileScope::~ProfileScope() = default;

}  // namespace dapo::ops
#endif
