// What a Comm holds, private to the parallel module: comm.cpp implements
// the host collectives on it, nccl_path.cpp the device ones, and
// mpi_handle.cpp hands its MPI communicator to parallel HDF5 (the one other
// user of the raw handle).
#pragma once

#include <mpi.h>

#include <atomic>
#include <string>

#include "dapo/parallel/comm.h"

namespace dapo::parallel {

struct Comm::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  // ncclComm_t, made on the first device collective (main thread); read by
  // the watchdog thread for nccl_async_error, hence atomic.
  std::atomic<void*> nccl{nullptr};
};

// A collective's buffer is on `device` and has data (a tensor with no
// elements may have none): the host path (comm.cpp) and the device path
// (nccl_path.cpp) check their buffers with it before any transfer.
inline void check_buffer(const Tensor& t, Device device, const char* what) {
  DAPO_CHECK(t.device == device, "Comm::", what, ": a tensor on ", device_name(t.device), ", expected ",
             device_name(device));
  DAPO_CHECK(t.data != nullptr || t.numel() == 0, "Comm::", what, ": null data");
}

// The device collectives (nccl_path.cpp; fatal errors in builds without CUDA).
struct NcclPath {
  static void all_reduce(const Comm& c, Tensor buf, ReduceOp op, void* stream);
  static void all_gather(const Comm& c, Tensor out, Tensor in, void* stream);
  static void reduce_scatter(const Comm& c, Tensor out, Tensor in, ReduceOp op, void* stream);
  static void broadcast(const Comm& c, Tensor buf, int root, void* stream);
  static std::string async_error(const Comm& c);
  static void init(const Comm& c);  // makes the communicator now
  static void destroy(Comm::Impl& impl);  // ncclCommDestroy, if one was made

 private:
  static void* communicator(const Comm& c);  // ncclComm_t, made collectively on first use
};

}  // namespace dapo::parallel
