// The copy op: the CPU path, and the dispatch, which cannot use
// DAPO_DISPATCH because a CUDA copy takes tensors on both devices.
#include "dapo/ops/copy.h"

#include <cstring>

#include "dapo/core/error.h"
#include "src/ops/cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"

namespace dapo::ops {

void copy(const Ctx& ctx, Tensor dst, Tensor src) {
  DAPO_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(), "copy: ", src.shape_string(), " ",
             dtype_name(src.dtype), " -> ", dst.shape_string(), " ", dtype_name(dst.dtype));
  DAPO_CHECK(!overlaps(dst, src), "copy: dst and src overlap");
  if (ctx.backend == Backend::cuda) {
#ifdef DAPO_WITH_CUDA
    cuda::copy(ctx, dst, src);
    return;
#else
    DAPO_FAIL("copy: a CUDA ctx in a build without CUDA");
#endif
  }
  DAPO_CHECK(dst.device == Device::cpu && src.device == Device::cpu, "copy: a device tensor with a CPU ctx");
  if (dst.nbytes() > 0) std::memcpy(dst.data, src.data, dst.nbytes());
}

void stream_synchronize(const Ctx& ctx) {
  if (ctx.backend != Backend::cuda) return;
#ifdef DAPO_WITH_CUDA
  cuda::stream_synchronize(ctx);
#endif
}

StreamEvent::StreamEvent(const Ctx& ctx) {
  if (ctx.backend != Backend::cuda) return;
#ifdef DAPO_WITH_CUDA
  event_ = cuda::event_create();
#else
  DAPO_FAIL("StreamEvent: a CUDA ctx in a build without CUDA");
#endif
}

StreamEvent::~StreamEvent() {
#ifdef DAPO_WITH_CUDA
  if (event_ != nullptr) cuda::event_destroy(event_);
#endif
}

void StreamEvent::record(const Ctx& ctx) {
  DAPO_CHECK((event_ != nullptr) == (ctx.backend == Backend::cuda), "StreamEvent::record on another backend");
#ifdef DAPO_WITH_CUDA
  if (event_ != nullptr) cuda::event_record(ctx, event_);
#endif
}

void StreamEvent::synchronize() {
#ifdef DAPO_WITH_CUDA
  if (event_ != nullptr) cuda::event_synchronize(event_);
#endif
}

}  // namespace dapo::ops
