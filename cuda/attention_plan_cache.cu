// The per-device cache of attention plans, reached through Ctx::attention_plans.
// Honestly empty: the attention kernels (attention_forward.cu,
// attention_backward.cu) are hand-written and need no per-shape plan - their
// tile sizes are compile-time constants, their work list depends on the
// device-side cu_seqlens and is rebuilt by a small kernel on every call, and
// the shared-memory limit is set per launch. The type stays so that
// CudaDevice's ownership does not change if a planned path (cuDNN SDPA, say)
// is added later.
#include "common.cuh"

namespace dapo::ops::cuda {

struct AttentionPlanCache {};

AttentionPlanCache* attention_plan_cache_create() { return new AttentionPlanCache(); }
void attention_plan_cache_destroy(AttentionPlanCache* cache) { delete cache; }

}  // namespace dapo::ops::cuda
