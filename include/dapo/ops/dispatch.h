// Dispatch helpers used by src/ops/<op>.cpp: forward an op to cpu::name or
// cuda::name with the same arguments. An op whose CUDA kernel has not been
// written yet says so by name instead of running the wrong code.
#pragma once

#include "dapo/ops/context.h"
#include "dapo/ops/op_profiler.h"

#define DAPO_DISPATCH_CPU_ONLY(ctx, name, ...)                                       \
  do {                                                                               \
    if ((ctx).backend == ::dapo::ops::Backend::cpu) return ::dapo::ops::cpu::name((ctx), __VA_ARGS__); \
    DAPO_FAIL("op " #name " has no CUDA kernel yet");                                \
  } while (0)

#ifdef DAPO_WITH_CUDA
// A CUDA op is bracketed by the Ctx's profiler when it has one (op_profiler.h).
#define DAPO_DISPATCH(ctx, name, ...)                                                \
  do {                                                                               \
    if ((ctx).backend == ::dapo::ops::Backend::cpu) return ::dapo::ops::cpu::name((ctx), __VA_ARGS__); \
    const ::dapo::ops::ProfileScope dapo_profile_((ctx), #name);                     \
    return ::dapo::ops::cuda::name((ctx), __VA_ARGS__);                             \
  } while (0)
#else
#define DAPO_DISPATCH(ctx, name, ...) DAPO_DISPATCH_CPU_ONLY(ctx, name, __VA_ARGS__)
#endif
