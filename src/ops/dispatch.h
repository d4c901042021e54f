// Dispatch helpers used by src/ops/<op>.cpp: forward an op to cpu::name or
// cuda::name with the same arguments. An op whose CUDA kernel has not been
// written yet says so by name instead of running the wrong code.
//
// Both macros first check that every tensor argument lives on the Ctx's
// device (check_devices below): one check for every op, before the backend
// touches any memory, instead of one per op that some ops forget.
#pragma once

#include <string>
#include <type_traits>

#include "dapo/ops/context.h"
#include "dapo/ops/op_profiler.h"

namespace dapo::ops::detail {

// The name of argument `position` (1-based) in `names`, the op's argument
// list as the macro stringized it ("out, rstd, in, weight, eps"). Commas
// inside brackets belong to one argument. Only called to word an error.
inline std::string argument_name(const char* names, int position) {
  std::string name;
  int at = 1, depth = 0;
  for (const char* p = names; *p != '\0'; ++p) {
    const char ch = *p;
    if (ch == '(' || ch == '[' || ch == '{') ++depth;
    if (ch == ')' || ch == ']' || ch == '}') --depth;
    if (ch == ',' && depth == 0) {
      ++at;
      continue;
    }
    if (at == position && !(name.empty() && ch == ' ')) name += ch;
  }
  while (!name.empty() && name.back() == ' ') name.pop_back();
  return name;
}

// Every Tensor among `args` that holds elements lives on the device of the
// Ctx's backend: a host pointer handed to a kernel, or a device pointer read
// on the host, would crash or read garbage far from the call. Tensors with
// no elements (an empty batch, or Tensor{} for a left-out optional) are
// never read and may sit anywhere; arguments that are not tensors are
// skipped.
template <class... Args>
void check_devices(const Ctx& ctx, const char* op, const char* names, const Args&... args) {
  const Device want = backend_device(ctx.backend);
  int position = 0;
  auto check = [&](const auto& arg) {
    ++position;
    if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, Tensor>) {
      DAPO_CHECK(!arg.defined() || arg.empty() || arg.device == want, "op ", op, ": argument ", position, " (",
                 argument_name(names, position), ") is on ", device_name(arg.device), ", the Ctx runs on ",
                 device_name(want));
    }
  };
  (check(args), ...);
}

}  // namespace dapo::ops::detail

#define DAPO_DISPATCH_CPU_ONLY(ctx, name, ...)                                       \
  do {                                                                               \
    if ((ctx).backend == ::dapo::ops::Backend::cpu) {                                \
      ::dapo::ops::detail::check_devices((ctx), #name, #__VA_ARGS__, __VA_ARGS__);   \
      return ::dapo::ops::cpu::name((ctx), __VA_ARGS__);                             \
    }                                                                                \
    DAPO_FAIL("op " #name " has no CUDA kernel yet");                                \
  } while (0)

#ifdef DAPO_WITH_CUDA
// A CUDA op is bracketed by the Ctx's profiler when it has one (op_profiler.h).
#define DAPO_DISPATCH(ctx, name, ...)                                                \
  do {                                                                               \
    ::dapo::ops::detail::check_devices((ctx), #name, #__VA_ARGS__, __VA_ARGS__);     \
    if ((ctx).backend == ::dapo::ops::Backend::cpu) return ::dapo::ops::cpu::name((ctx), __VA_ARGS__); \
    const ::dapo::ops::ProfileScope dapo_profile_((ctx), #name);                     \
    return ::dapo::ops::cuda::name((ctx), __VA_ARGS__);                             \
  } while (0)
#else
#define DAPO_DISPATCH(ctx, name, ...) DAPO_DISPATCH_CPU_ONLY(ctx, name, __VA_ARGS__)
#endif
