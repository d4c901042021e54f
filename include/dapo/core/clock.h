// Elapsed wall-clock time: one clock and one way to read it, for every
// module that reports seconds (trainer phases, the generation engine, the
// benchmarks). trainer/timing.h adds the collective form on top.
#pragma once

#include <chrono>

namespace dapo {

// Monotonic: a change of the system time (NTP, an admin) must not make a
// phase take negative or hours-long time.
using Clock = std::chrono::steady_clock;

// Seconds from `start` to now.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds from `start` to `end`.
inline double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

}  // namespace dapo
