// The MPI runtime of one dapo process: MPI_Init_thread on construction,
// MPI_Finalize on destruction, and the fatal-error hook that turns any
// DAPO_CHECK failure into MPI_Abort so that one failing rank ends the job
// instead of leaving the others hanging in a collective.
#pragma once

#include <string>

namespace dapo::parallel {

class Runtime {
 public:
  Runtime(int* argc, char*** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Rank among the ranks of this host (GPU selection: one rank per GPU).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // Ends the whole job with this exit code (MPI_Abort).
  [[noreturn]] static void abort_job(int exit_code);

 private:
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
};

}  // namespace dapo::parallel
