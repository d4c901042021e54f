// SIGUSR1/SIGTERM/SIGINT/SIGHUP recorded by a handler, agreed on at step
// boundaries.
#include "dapo/trainer/stop_signals.h"

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "dapo/core/error.h"
#include "dapo/core/log.h"

namespace dapo::trainer {
namespace {

// Written by the handler, read by the trainer: lock-free atomics are
// async-signal-safe.
std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};
// SIGINT and SIGHUP that the process started with ignored (nohup, a
// background job of a script): they stay ignored, as the shell's convention
// is. Bit `sig` set; -1 until the first StopSignals looks (once per process:
// the destructor leaves every stop signal ignored, which a later instance,
// in a test, must not take for the launcher's choice).
std::atomic<int> g_left_ignored{-1};

// The acknowledgement of the first signal, at once: a generation phase at
// the paper's lengths runs for minutes before the step boundary where the
// run stops, and a user (or Slurm's log) should not take the silence for a
// signal that went nowhere. One line, by world rank 0 (or a process whose
// rank is not known yet), with write(): async-signal-safe.
void acknowledge(int sig) {
  if (process_rank() > 0) return;
  // Composed on the stack (stop_signal_name returns literals), written at
  // once so that the line is not cut by other output.
  char line[128];
  size_t n = 0;
  for (const char* part :
       {"dapo: received ", stop_signal_name(sig), ": stopping after the current step, with a checkpoint (exit 4)\n"})
    for (; *part != '\0' && n < sizeof line; ++part) line[n++] = *part;
  const ssize_t written = ::write(STDERR_FILENO, line, n);
  (void)written;  // nothing to do about a closed stderr inside a handler
}

void on_signal(int sig) {
  const int saved_errno = errno;  // the interrupted code may be about to read it
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) acknowledge(sig);  // keep the first
  errno = saved_errno;
}

constexpr int kStopSignals[] = {SIGUSR1, SIGTERM, SIGINT, SIGHUP};

bool handled(int sig) { return !(g_left_ignored.load() & (1 << sig)); }

int ignored_at_start() {
  int mask = 0;
  for (const int sig : {SIGINT, SIGHUP}) {
    struct sigaction now = {};
    if (sigaction(sig, nullptr, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_IGN)
      mask |= 1 << sig;
  }
  return mask;
}

void install(int sig) {
  struct sigaction sa = {};
  sa.sa_handler = &on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI and file I/O calls resume after the handler
  DAPO_CHECK(sigaction(sig, &sa, nullptr) == 0, "sigaction(", stop_signal_name(sig), ")");
}

// A handler is not enough: a blocked signal stays pending and never runs
// it, and the mask survives fork and exec, so a launcher that blocks
// SIGUSR1 would hide every preemption warning (the run then goes on to be
// killed without a checkpoint).
void unblock_on_this_thread() {
  sigset_t stop;
  sigemptyset(&stop);
  for (const int sig : kStopSignals)
    if (handled(sig)) sigaddset(&stop, sig);
  DAPO_CHECK(pthread_sigmask(SIG_UNBLOCK, &stop, nullptr) == 0, "pthread_sigmask(SIG_UNBLOCK)");
}

// What now handles `sig` instead of on_signal, for the warning.
std::string disposition(const struct sigaction& sa) {
  if (sa.sa_flags & SA_SIGINFO) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(sa.sa_sigaction), &info) != 0 && info.dli_fname != nullptr)
      return cat("a handler in ", info.dli_fname);
    return "another handler";
  }
  if (sa.sa_handler == SIG_IGN) return "ignored";
  if (sa.sa_handler == SIG_DFL) return "the default action";
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(sa.sa_handler), &info) != 0 && info.dli_fname != nullptr)
    return cat("a handler in ", info.dli_fname);
  return "another handler";
}

}  // namespace

StopSignals::StopSignals() {
  DAPO_CHECK(!g_installed.exchange(true), "StopSignals installed twice");
  g_signal.store(0);
  int unset = -1;
  g_left_ignored.compare_exchange_strong(unset, ignored_at_start());
  for (const int sig : kStopSignals)
    if (handled(sig)) install(sig);
  // On the main thread before MPI, CUDA or NCCL start theirs, which
  // inherit this mask.
  unblock_on_this_thread();
}

StopSignals::~StopSignals() {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (const int sig : kStopSignals) sigaction(sig, &ignore, nullptr);
  g_installed.store(false);
}

int StopSignals::pending() const { return g_signal.load(); }

void StopSignals::reclaim() const {
  for (const int sig : kStopSignals) {
    if (!handled(sig)) continue;
    struct sigaction now = {};
    if (sigaction(sig, nullptr, &now) != 0) continue;
    if (!(now.sa_flags & SA_SIGINFO) && now.sa_handler == &on_signal) continue;
    DAPO_WARN("stop signals: ", stop_signal_name(sig), " went to ", disposition(now),
              " (set by a library after dapo's own handler); dapo's handler is back, so that preemption still saves a "
              "checkpoint");
    install(sig);
  }
  unblock_on_this_thread();
}

int agree_on_stop(const parallel::Comm& comm, const StopSignals& signals) {
  signals.reclaim();
  return int(comm.all_reduce_i64(signals.pending(), parallel::ReduceOp::max));
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace dapo::trainer
