// Wall-clock helpers of the trainer's phases and metrics: core/clock.h's
// Clock and seconds_since, and their collective form.
#pragma once

#include "dapo/core/clock.h"
#include "dapo/parallel/comm.h"

namespace dapo::trainer {

// World rank 0's seconds since `start`, on every rank of `world`: metrics
// that carry a time are then identical on every rank. Collective.
inline double root_seconds_since(const parallel::Comm& world, Clock::time_point start) {
  return world.all_reduce_f64(world.rank() == 0 ? seconds_since(start) : 0.0, parallel::ReduceOp::sum);
}

}  // namespace dapo::trainer
