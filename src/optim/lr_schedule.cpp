// Linear warmup then constant learning rate (lr_schedule.h).
#include "dapo/optim/lr_schedule.h"

#include "dapo/core/error.h"

namespace dapo::optim {

double warmup_lr(double base_lr, int64_t warmup_steps, int64_t training_step) {
  DAPO_CHECK(base_lr > 0 && warmup_steps >= 0 && training_step >= 0, "warmup_lr(", base_lr, ", ", warmup_steps,
             ", ", training_step, ")");
  if (training_step >= warmup_steps) return base_lr;
  // LambdaLR multiplies the base lr by the factor, both as Python floats.
  return base_lr * (double(training_step) / double(warmup_steps));
}

}  // namespace dapo::optim
