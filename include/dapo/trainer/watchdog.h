// A watchdog per rank: a thread that ends the process when the current
// phase of the run (generation, update, validation, checkpoint, the
// agreement at a step boundary) has run longer than train.phase_timeout_s,
// or when a watched communicator reports an asynchronous NCCL error (a
// peer or link failed: NCCL would otherwise leave this rank waiting).
// A rank stuck in a collective whose peer died or hangs never returns to
// check anything itself, so a separate thread must: it prints one line
// (rank, host, phase, step, how long) and exits the process with
// kWatchdogExit, which makes mpirun or `srun -K1` end every other rank of
// the job - no hang. (std::_Exit rather than MPI_Abort: MPI runs
// MPI_THREAD_FUNNELED, so the watchdog thread may not call MPI.)
//
// Testing hook: DAPO_FAULT_STALL="RANK:PHASE" in the environment makes
// world rank RANK stop (sleep forever) when it enters PHASE, as a stuck
// rank would; the tests use it to check that the job still ends.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dapo/core/clock.h"
#include "dapo/parallel/comm.h"

namespace dapo::trainer {

inline constexpr int kWatchdogExit = 5;

class Watchdog {
 public:
  // timeout_s <= 0: no deadline (the thread still polls watched
  // communicators). `rank` names the process in the line it prints.
  Watchdog(double timeout_s, int rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A new phase starts now (its deadline is now + timeout). `phase` must be
  // a string literal (kept by pointer).
  void enter(const char* phase, int64_t step);
  // Polls `comm`'s NCCL errors too (every half second) from now on; `name`
  // (a string literal) names it in the message. `comm` must outlive the
  // watchdog.
  void watch(const parallel::Comm* comm, const char* name);

 private:
  void run();

  double timeout_s_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  const char* phase_ = "start";
  std::vector<std::pair<const parallel::Comm*, const char*>> comms_;
  int64_t step_ = 0;
  Clock::time_point since_;
  int stall_rank_ = -1;
  std::string stall_phase_;
  std::thread thread_;
};

}  // namespace dapo::trainer
