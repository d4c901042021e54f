// The per-device cache of attention plans (see attention.cu).
// Placeholder layout until the attention kernels land: an empty cache.
#include "common.cuh"

namespace dapo::ops::cuda {

struct AttentionPlanCache {};

AttentionPlanCache* attention_plan_cache_create() { return new AttentionPlanCache(); }
void attention_plan_cache_destroy(AttentionPlanCache* cache) { delete cache; }

}  // namespace dapo::ops::cuda
