// Backend dispatch of the AdamW step.
#include "dapo/ops/adamw.h"

#include "dapo/ops/dispatch.h"

namespace dapo::ops {

void adamw_step(const Ctx& ctx, Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq,
                const AdamWParams& p) {
  DAPO_DISPATCH_CPU_ONLY(ctx, adamw_step, param, grad, exp_avg, exp_avg_sq, p);
}

}  // namespace dapo::ops
