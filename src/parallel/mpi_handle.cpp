// mpi_comm_of: see mpi_handle.h.
#include "dapo/parallel/mpi_handle.h"

#include "comm_impl.h"
#include "dapo/core/error.h"

namespace dapo::parallel {

// The friend of Comm that may look inside it.
struct CommNative {
  static MPI_Comm of(const Comm& comm) {
    DAPO_CHECK(comm.impl_ != nullptr, "mpi_comm_of: an empty (default-constructed or moved-from) Comm");
    return comm.impl_->comm;
  }
};

MPI_Comm mpi_comm_of(const Comm& comm) { return CommNative::of(comm); }

}  // namespace dapo::parallel
