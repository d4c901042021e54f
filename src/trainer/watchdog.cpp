// The watchdog thread (watchdog.h).
#include "dapo/trainer/watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dapo/core/error.h"

namespace dapo::trainer {

Watchdog::Watchdog(double timeout_s, int rank)
    : timeout_s_(timeout_s), rank_(rank), since_(Clock::now()) {
  if (const char* stall = std::getenv("DAPO_FAULT_STALL")) {
    const char* colon = std::strchr(stall, ':');
    if (colon) {
      stall_rank_ = std::atoi(stall);
      stall_phase_ = colon + 1;
    }
  }
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::enter(const char* phase, int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = phase;
    step_ = step;
    since_ = Clock::now();
  }
  if (rank_ == stall_rank_ && stall_phase_ == phase) {
    std::fprintf(stderr, "dapo: DAPO_FAULT_STALL: rank %d stops in phase '%s' of step %lld\n", rank_, phase,
                 (long long)step);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

void Watchdog::watch(const parallel::Comm* comm, const char* name) {
  std::lock_guard<std::mutex> lock(mu_);
  comms_.emplace_back(comm, name);
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(500));
    if (stop_) break;
    for (const auto& [comm, name] : comms_) {
      const std::string error = comm->nccl_async_error();
      if (error.empty()) continue;
      std::fprintf(stderr,
                   "dapo: watchdog: rank %d on %s: NCCL error on the %s communicator in phase '%s' of step %lld: "
                   "%s: ending the job\n",
                   rank_, host_name().c_str(), name, phase_, (long long)step_, error.c_str());
      std::fflush(stderr);
      std::_Exit(kWatchdogExit);
    }
    const double ran = seconds_since(since_);
    if (timeout_s_ > 0 && ran > timeout_s_) {
      std::fprintf(stderr,
                   "dapo: watchdog: rank %d on %s: phase '%s' of step %lld has run %.0f s, past "
                   "train.phase_timeout_s = %g (a dead or stuck rank?): ending the job\n",
                   rank_, host_name().c_str(), phase_, (long long)step_, ran, timeout_s_);
      std::fflush(stderr);
      std::_Exit(kWatchdogExit);
    }
  }
}

}  // namespace dapo::trainer
