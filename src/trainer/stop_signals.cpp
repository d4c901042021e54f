// SIGUSR1/SIGTERM recorded by a handler, agreed on at step boundaries.
#include "dapo/trainer/stop_signals.h"

#include <signal.h>

#include <atomic>

#include "dapo/core/error.h"

namespace dapo::trainer {
namespace {

// Written by the handler, read by the trainer: lock-free atomics are
// async-signal-safe.
std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};

void on_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);  // keep the first
}

}  // namespace

StopSignals::StopSignals() {
  DAPO_CHECK(!g_installed.exchange(true), "StopSignals installed twice");
  g_signal.store(0);
  struct sigaction sa = {};
  sa.sa_handler = &on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI and file I/O calls resume after the handler
  DAPO_CHECK(sigaction(SIGUSR1, &sa, nullptr) == 0, "sigaction(SIGUSR1)");
  DAPO_CHECK(sigaction(SIGTERM, &sa, nullptr) == 0, "sigaction(SIGTERM)");
}

StopSignals::~StopSignals() {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGUSR1, &ignore, nullptr);
  sigaction(SIGTERM, &ignore, nullptr);
  g_installed.store(false);
}

int StopSignals::pending() const { return g_signal.load(); }

int agree_on_stop(const parallel::Comm& comm, const StopSignals& signals) {
  return int(comm.all_reduce_i64(signals.pending(), parallel::ReduceOp::max));
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace dapo::trainer
