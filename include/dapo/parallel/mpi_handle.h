// The raw MPI communicator of a Comm, for the one library outside the
// parallel module that needs it: parallel HDF5 (H5Pset_fapl_mpio), whose
// own header includes mpi.h anyway. Everything else goes through Comm.
#pragma once

#include <mpi.h>

#include "dapo/parallel/comm.h"

namespace dapo::parallel {

// The communicator stays owned by `comm` (do not free it); it is valid as
// long as `comm` lives. HDF5 duplicates it when it opens a file. An empty
// Comm is a fatal error.
MPI_Comm mpi_comm_of(const Comm& comm);

}  // namespace dapo::parallel
