// The learning-rate schedule: linear warmup from 0, then constant, as verl's
// FSDP actor builds it (torch_functional.get_constant_schedule_with_warmup
// stepped once per training step after the update):
//   lr(s) = lr * s / warmup_steps   for s < warmup_steps
//   lr(s) = lr                      otherwise
// where s is the 0-based index of the training step (the number of
// training steps already completed). So the very first step runs with
// lr = 0 when warmup_steps > 0 (its AdamW moments still update), and
// every mini-batch of one training step uses the same lr.
#pragma once

#include <cstdint>

#include "dapo/core/config.h"

namespace dapo::optim {

// base_lr > 0, warmup_steps >= 0, training_step >= 0 (DAPO_CHECK).
double warmup_lr(double base_lr, int64_t warmup_steps, int64_t training_step);
inline double warmup_lr(const OptimConfig& c, int64_t training_step) {
  return warmup_lr(c.lr, c.warmup_steps, training_step);
}

}  // namespace dapo::optim
