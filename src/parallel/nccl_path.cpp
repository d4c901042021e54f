// Device collectives of Comm through NCCL (comm.h): the communicator is made
// on the first device collective from an id rank 0 creates and broadcasts
// over the Comm's MPI group; every call is enqueued on the caller's stream.
// Builds without CUDA keep the seam and fail a device tensor with a message.
#include "comm_impl.h"
#include "dapo/core/error.h"
#include "dapo/parallel/mpi_check.h"

#ifdef DAPO_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace dapo::parallel {

#ifdef DAPO_WITH_CUDA
namespace {

#define DAPO_NCCL_CHECK(call)                                                                        \
  do {                                                                                               \
    const ncclResult_t dapo_nccl_rc_ = (call);                                                       \
    if (dapo_nccl_rc_ != ncclSuccess)                                                                \
      DAPO_FAIL(#call, " failed: ", ncclGetErrorString(dapo_nccl_rc_), " (", ncclGetLastError(nullptr), \
                "); NCCL_DEBUG=WARN says more");                                                      \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  DAPO_FAIL("bad dtype ", int(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  DAPO_FAIL("bad reduce op ", int(op));
}

cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

void* NcclPath::communicator(const Comm& c) {
  Comm::Impl& impl = *c.impl_;
  if (void* p = impl.nccl.load()) return p;
  ncclUniqueId id{};
  if (c.rank_ == 0) DAPO_NCCL_CHECK(ncclGetUniqueId(&id));
  DAPO_MPI_CHECK(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, impl.comm));
  ncclComm_t comm = nullptr;
  DAPO_NCCL_CHECK(ncclCommInitRank(&comm, c.size_, id, c.rank_));
  impl.nccl.store(comm);
  return comm;
}

void NcclPath::all_reduce(const Comm& c, Tensor buf, ReduceOp op, void* stream) {
  check_buffer(buf, Device::cuda, "all_reduce");
  // One rank: the reduction is the buffer itself. No launch (the cached
  // forward at tp = 1 would pay two per layer) and no communicator.
  if (c.size_ == 1) return;
  ncclComm_t comm = static_cast<ncclComm_t>(communicator(c));
  DAPO_NCCL_CHECK(ncclAllReduce(buf.data, buf.data, size_t(buf.numel()), nccl_type(buf.dtype), nccl_op(op), comm,
                                stream_of(stream)));
}

void NcclPath::all_gather(const Comm& c, Tensor out, Tensor in, void* stream) {
  check_buffer(out, Device::cuda, "all_gather");
  check_buffer(in, Device::cuda, "all_gather");
  ncclComm_t comm = static_cast<ncclComm_t>(communicator(c));
  // NCCL takes in == this rank's block of out as the in-place form.
  DAPO_NCCL_CHECK(ncclAllGather(in.data, out.data, size_t(in.numel()), nccl_type(in.dtype), comm, stream_of(stream)));
}

void NcclPath::reduce_scatter(const Comm& c, Tensor out, Tensor in, ReduceOp op, void* stream) {
  check_buffer(out, Device::cuda, "reduce_scatter");
  check_buffer(in, Device::cuda, "reduce_scatter");
  ncclComm_t comm = static_cast<ncclComm_t>(communicator(c));
  DAPO_NCCL_CHECK(ncclReduceScatter(in.data, out.data, size_t(out.numel()), nccl_type(in.dtype), nccl_op(op), comm,
                                    stream_of(stream)));
}

void NcclPath::broadcast(const Comm& c, Tensor buf, int root, void* stream) {
  check_buffer(buf, Device::cuda, "broadcast");
  if (c.size_ == 1) return;
  ncclComm_t comm = static_cast<ncclComm_t>(communicator(c));
  DAPO_NCCL_CHECK(ncclBroadcast(buf.data, buf.data, size_t(buf.numel()), nccl_type(buf.dtype), root, comm,
                                stream_of(stream)));
}

void NcclPath::init(const Comm& c) { communicator(c); }

std::string NcclPath::async_error(const Comm& c) {
  void* p = c.impl_->nccl.load();
  if (!p) return {};
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(static_cast<ncclComm_t>(p), &state);
  if (rc != ncclSuccess) return cat("ncclCommGetAsyncError failed: ", ncclGetErrorString(rc));
  if (state == ncclSuccess || state == ncclInProgress) return {};
  return ncclGetErrorString(state);
}

void NcclPath::destroy(Comm::Impl& impl) {
  if (void* p = impl.nccl.exchange(nullptr)) ncclCommDestroy(static_cast<ncclComm_t>(p));
}

#else  // no CUDA in this build

namespace {
[[noreturn]] void no_cuda(const char* what) {
  DAPO_FAIL("Comm::", what, ": a device tensor, but this dapo was built without CUDA (DAPO_CUDA=OFF or no nvcc)");
}
}  // namespace

void NcclPath::all_reduce(const Comm&, Tensor, ReduceOp, void*) { no_cuda("all_reduce"); }
void NcclPath::all_gather(const Comm&, Tensor, Tensor, void*) { no_cuda("all_gather"); }
void NcclPath::reduce_scatter(const Comm&, Tensor, Tensor, ReduceOp, void*) { no_cuda("reduce_scatter"); }
void NcclPath::broadcast(const Comm&, Tensor, int, void*) { no_cuda("broadcast"); }
std::string NcclPath::async_error(const Comm&) { return {}; }
void NcclPath::init(const Comm&) { no_cuda("init_nccl"); }
void NcclPath::destroy(Comm::Impl&) {}
void* NcclPath::communicator(const Comm&) { no_cuda("communicator"); }

#endif

}  // namespace dapo::parallel
