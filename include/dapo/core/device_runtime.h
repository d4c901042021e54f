// The device runtime boundary: the few things host code (core, model,
// optim) asks of a GPU runtime - device and pinned host memory, copies and
// memsets on a stream, a stream's synchronisation, memory info. One
// implementation per build, chosen by CMake: src/core/runtime/cuda.cpp (the
// CUDA runtime API) in CUDA builds, src/core/runtime/none.cpp otherwise,
// where no device is available() and the memory queries give 0; asking a
// build without CUDA for device work is a bug, fatal with its `what`.
// Kernels and library handles stay in ops (cuda/); this is only what moves
// and holds bytes.
//
// Streams are opaque: a cudaStream_t in CUDA builds, nullptr the default
// stream. Every call is checked; a failure is fatal with the runtime's
// error text and `what` (the buffer it was for).
#pragma once

#include <cstddef>

namespace dapo::device_runtime {

// Whether this process sees a device (a CUDA build with a GPU).
bool available();

void* alloc(size_t bytes);  // device memory; fatal when it cannot be had
void free(void* p);         // nullptr: nothing
// Page-locked host memory (fast, asynchronous copies); fatal on failure.
void* alloc_pinned(size_t bytes);
void free_pinned(void* p);

// The device's free and total memory in bytes (0 without a device).
size_t memory_free();
size_t memory_total();

enum class CopyKind { host_to_device, device_to_host, device_to_device };
void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream, const char* what);
void memset_async(void* dst, int value, size_t bytes, void* stream, const char* what);
void synchronize(void* stream, const char* what);

}  // namespace dapo::device_runtime
