// device_runtime.h in a build without CUDA: no device; device work asked of
// it is a bug in the caller (every caller keeps host buffers on the host).
#include "dapo/core/device_runtime.h"
#include "dapo/core/error.h"

namespace dapo::device_runtime {

bool available() { return false; }
void* alloc(size_t bytes) { DAPO_FAIL("device memory (", bytes, " bytes) requested, but this build has no CUDA"); }
void free(void* p) { DAPO_CHECK(p == nullptr, "device memory freed in a build without CUDA"); }
void* alloc_pinned(size_t bytes) { DAPO_FAIL("pinned memory (", bytes, " bytes) requested, but this build has no CUDA"); }
void free_pinned(void* p) { DAPO_CHECK(p == nullptr, "pinned memory freed in a build without CUDA"); }
size_t memory_free() { return 0; }
size_t memory_total() { return 0; }
void copy_async(void*, const void*, size_t, CopyKind, void*, const char* what) {
  DAPO_FAIL("a device copy (", what, ") in a build without CUDA");
}
void memset_async(void*, int, size_t, void*, const char* what) {
  DAPO_FAIL("a device memset (", what, ") in a build without CUDA");
}
void synchronize(void*, const char*) {}  // no device work can be pending

}  // namespace dapo::device_runtime
