// The step I/O ops: their checks, the CPU path and the dispatch, which
// cannot use DAPO_DISPATCH because the tensors straddle host and device.
#include "dapo/ops/step_io.h"

#include <cstring>

#include "dapo/core/error.h"
#include "src/ops/cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops {
namespace {

void check_words(const Tensor& t, Device device, const char* what) {
  DAPO_CHECK(t.dtype == DType::i32 && t.device == device, "step I/O: ", what, " must be i32 on the ",
             device == Device::cuda ? "device" : "host", ", got ", dtype_name(t.dtype), " on the ",
             t.device == Device::cuda ? "device" : "host");
  DAPO_CHECK(t.numel() == 0 || t.data != nullptr, "step I/O: ", what, " has no data");
  DAPO_CHECK((reinterpret_cast<uintptr_t>(t.data) & 15) == 0, "step I/O: ", what, " is not 16-byte aligned");
}

// The contracts of step_io.h, for the ops and for a captured graph's new
// arguments. d: where the device side lives (Device::cuda for a CUDA ctx).
void check_step_in(Device d, const StepIn& a) {
  check_words(a.host, Device::cpu, "host");
  check_words(a.device, d, "device");
  check_words(a.tokens, d, "tokens");
  const int64_t n = a.host.numel();
  DAPO_CHECK(a.device.numel() == n, "step_in: ", n, " host words into a device mirror of ", a.device.numel());
  DAPO_CHECK(n <= a.capacity, "step_in: ", n, " words over the launch's capacity of ", a.capacity);
  DAPO_CHECK(!overlaps(a.host, a.device), "step_in: host and device overlap");
  const auto* base = static_cast<const int32_t*>(a.device.data);
  const auto* tok = static_cast<const int32_t*>(a.tokens.data);
  DAPO_CHECK(a.tokens.numel() == 0 || (tok >= base && tok + a.tokens.numel() <= base + n),
             "step_in: tokens must lie inside the device mirror");
  DAPO_CHECK(a.fed_count >= 0 && a.fed_count <= a.tokens.numel(), "step_in: fed_count ", a.fed_count, " of ",
             a.tokens.numel(), " tokens");
  if (a.fed_count > 0) {
    DAPO_CHECK(a.fed.dtype == DType::i32 && a.fed.device == d && a.fed.numel() >= a.fed_count && a.fed.data,
               "step_in: fed must be i32 on the ctx's device with at least ", a.fed_count, " tokens, got ",
               a.fed.shape_string());
    DAPO_CHECK(!overlaps(a.fed, a.device), "step_in: fed overlaps the device mirror");
  }
}

void check_step_out(Device d, const StepOut& a) {
  check_words(a.host, Device::cpu, "host");
  check_words(a.device, d, "device");
  DAPO_CHECK(a.host.numel() == a.device.numel(), "step_out: ", a.device.numel(), " device words into ",
             a.host.numel(), " host words");
  DAPO_CHECK(a.device.numel() <= a.capacity, "step_out: ", a.device.numel(), " words over the launch's capacity of ",
             a.capacity);
  DAPO_CHECK(!overlaps(a.host, a.device), "step_out: host and device overlap");
}

}  // namespace

void step_in(const Ctx& ctx, const StepIn& a) {
  check_step_in(backend_device(ctx.backend), a);
  if (ctx.backend == Backend::cuda) {
#ifdef DAPO_WITH_CUDA
    return cuda::step_in(ctx, a);
#else
    DAPO_FAIL("step_in: a CUDA ctx in a build without CUDA");
#endif
  }
  if (a.host.numel() > 0) std::memcpy(a.device.data, a.host.data, a.host.nbytes());
  if (a.fed_count > 0) std::memcpy(a.tokens.data, a.fed.data, size_t(a.fed_count) * sizeof(int32_t));
}

void step_out(const Ctx& ctx, const StepOut& a) {
  check_step_out(backend_device(ctx.backend), a);
  if (ctx.backend == Backend::cuda) {
#ifdef DAPO_WITH_CUDA
    return cuda::step_out(ctx, a);
#else
    DAPO_FAIL("step_out: a CUDA ctx in a build without CUDA");
#endif
  }
  if (a.host.numel() > 0) std::memcpy(a.host.data, a.device.data, a.host.nbytes());
}

void set_step_in(CapturedGraph& graph, const StepIn& a) {
  check_step_in(Device::cuda, a);
#ifdef DAPO_WITH_CUDA
  cuda::set_step_in(graph, a);
#else
  (void)graph;
  (void)a;
  DAPO_FAIL("set_step_in: this build has no CUDA");
#endif
}

void set_step_out(CapturedGraph& graph, const StepOut& a) {
  check_step_out(Device::cuda, a);
#ifdef DAPO_WITH_CUDA
  cuda::set_step_out(graph, a);
#else
  (void)graph;
  (void)a;
  DAPO_FAIL("set_step_out: this build has no CUDA");
#endif
}

}  // namespace dapo::ops
