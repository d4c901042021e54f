// The CPU backend's ops: the fp32 reference every other backend is tested
// against. Private to dapo_ops and its tests; callers go through the ops::
// functions of dapo/ops/*.h, whose headers hold each op's contract.
#pragma once

#include "dapo/ops/adamw.h"
#include "dapo/ops/attention.h"
#include "dapo/ops/cast.h"
#include "dapo/ops/embedding.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/kv_copy.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/logprob.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/sum_squares.h"
#include "dapo/ops/swiglu.h"

namespace dapo::ops::cpu {

#include "src/ops/backend_ops.inc"

}  // namespace dapo::ops::cpu
