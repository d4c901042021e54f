// DAPO_MPI_CHECK: every MPI call goes through it; a failure prints the MPI
// error string with file:line, rank and host, then aborts the job.
// Internal to the parallel module (only it includes mpi.h).
#pragma once

#include <mpi.h>

#include "dapo/core/error.h"

namespace dapo::parallel::detail {
inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, size_t(len));
}
}  // namespace dapo::parallel::detail

#define DAPO_MPI_CHECK(call)                                                              \
  do {                                                                                    \
    const int dapo_mpi_rc_ = (call);                                                      \
    if (dapo_mpi_rc_ != MPI_SUCCESS) [[unlikely]]                                         \
      ::dapo::fatal(__FILE__, __LINE__, ::dapo::cat(#call ": ",                           \
                    ::dapo::parallel::detail::mpi_error_string(dapo_mpi_rc_)));           \
  } while (0)
