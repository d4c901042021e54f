// Preemption and time limits (Slurm's `--signal=B:USR1@300`, then SIGTERM at
// the end), Ctrl-C and a closed terminal: SIGUSR1, SIGTERM, SIGINT or
// SIGHUP asks the run to stop. The handler only
// records the signal and, on world rank 0, writes one line saying so
// (async-signal-safe); the trainer polls at every step
// boundary, where the ranks agree with one all-reduce (a signal that reached
// some ranks only stops them all, together), write a checkpoint and exit
// with kPreemptedExit so the batch script requeues the job. A second signal
// during the save changes nothing: the save completes (it is atomic
// anyway, .partial + rename). SIGKILL cannot be caught: the previous
// checkpoint is what a restart then finds. A SIGINT or SIGHUP that the
// process started with ignored (`nohup dapo train`, `dapo train &` in a
// script) stays ignored: the launcher asked for that.
//
// The recorded signal is process-wide state, as a signal handler needs;
// StopSignals owns the handlers' lifetime (installed in the constructor;
// one instance at a time). The destructor leaves the signals IGNORED, not
// at their defaults: it runs as the process ends, while Slurm or mpirun may
// still be sending the stop signal (the fault test sends one every 20 ms),
// and a late SIGUSR1 must not turn a clean exit 4 into death by signal.
#pragma once

#include "dapo/parallel/comm.h"

namespace dapo::trainer {

// The exit code of a run stopped by a signal after saving its checkpoint:
// "requeue me" (README, exit codes).
inline constexpr int kPreemptedExit = 4;

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGUSR1, SIGTERM, SIGINT or SIGHUP), 0 if none.
  int pending() const;

  // Puts the handlers back if something replaced them (a library may
  // install its own SIGUSR1 handler or ignore the signal once it starts,
  // after the constructor), with a warning naming what had them, and
  // unblocks them on the calling thread. Cheap (four sigaction
  // queries): agree_on_stop calls it at every step boundary.
  void reclaim() const;
};

// Collective over `comm`: the signal any rank received (the largest
// number if several), 0 if none. Calls signals.reclaim() first.
int agree_on_stop(const parallel::Comm& comm, const StopSignals& signals);

// "SIGUSR1", "SIGTERM", "SIGINT", "SIGHUP", or "a signal".
const char* stop_signal_name(int sig);

}  // namespace dapo::trainer
