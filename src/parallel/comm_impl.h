// What a Comm holds, private to the parallel module: comm.cpp implements
// the collectives on it and mpi_handle.cpp hands its MPI communicator to
// parallel HDF5 (the one other user of the raw handle).
#pragma once

#include <mpi.h>

#include "dapo/parallel/comm.h"

namespace dapo::parallel {

struct Comm::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
};

}  // namespace dapo::parallel
