// The per-device cache of cuBLASLt GEMM plans (see matmul.cu).
// Placeholder layout until the cuBLASLt GEMM lands: an empty cache.
#include "common.cuh"

namespace dapo::ops::cuda {

struct GemmPlanCache {};

GemmPlanCache* gemm_plan_cache_create() { return new GemmPlanCache(); }
void gemm_plan_cache_destroy(GemmPlanCache* cache) { delete cache; }

}  // namespace dapo::ops::cuda
