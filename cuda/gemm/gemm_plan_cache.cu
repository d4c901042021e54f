// The per-device cache of cuBLASLt GEMM plans (see gemm_plan_cache.cuh and
// matmul.cu): per key, the matmul descriptor, the three layouts and the
// heuristic's first algorithm. Building a plan costs a heuristic query (tens
// of microseconds on the host); the model runs a few dozen distinct shapes,
// so after the first step every GEMM is a map lookup.
#include <map>
#include <utility>

#include "gemm/gemm_plan_cache.cuh"

namespace dapo::ops::cuda {

struct GemmPlanCache {
  std::map<GemmKey, GemmPlan> plans;

  GemmPlanCache() = default;
  GemmPlanCache(const GemmPlanCache&) = delete;
  GemmPlanCache& operator=(const GemmPlanCache&) = delete;
  ~GemmPlanCache() {
    // Statuses ignored: this runs at device teardown, possibly while a real
    // failure is being reported.
    for (auto& [key, p] : plans) {
      if (p.a) cublasLtMatrixLayoutDestroy(p.a);
      if (p.b) cublasLtMatrixLayoutDestroy(p.b);
      if (p.c) cublasLtMatrixLayoutDestroy(p.c);
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    }
  }
};

GemmPlanCache* gemm_plan_cache_create() { return new GemmPlanCache(); }
void gemm_plan_cache_destroy(GemmPlanCache* cache) { delete cache; }

namespace {

// RAII for the heuristic's preference descriptor, which the plan does not keep.
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { DAPO_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, T v) {
    DAPO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)));
  }
};

void destroy_descriptors(GemmPlan& p) {
  if (p.a) DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.a));
  if (p.b) DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.b));
  if (p.c) DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.c));
  if (p.desc) DAPO_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
  p = GemmPlan{};
}

void build_plan(GemmPlan& p, cublasLtHandle_t lt, const GemmKey& key, size_t workspace_bytes, const void* bias);

// A batch-invariant key: the algorithm of n = kInvariantRows, split-K off,
// checked against this n's layouts.
void build_invariant_plan(GemmPlan& p, cublasLtHandle_t lt, const GemmKey& key, size_t workspace_bytes,
                          const void* bias) {
  DAPO_CHECK(key.batch == 1, "a batch-invariant GEMM is one product, not a batch of ", key.batch);
  // The heuristic picks by alignment too: one algorithm for every call
  // needs every call's operands equally aligned.
  DAPO_CHECK(key.align_a == 16 && key.align_b == 16 && key.align_c == 16 &&
                 (!key.bias_epilogue || key.align_bias == 16),
             "a batch-invariant GEMM needs 16-byte aligned operands (rows of a multiple of 8 bf16 or 4 f32 "
             "values); alignments A ", int(key.align_a), " B ", int(key.align_b), " C ", int(key.align_c), " bias ",
             int(key.align_bias));
  GemmKey canon = key;
  canon.batch_invariant = false;
  canon.n = kInvariantRows;
  GemmPlan chosen;
  build_plan(chosen, lt, canon, workspace_bytes, bias);
  const bool found = chosen.found;
  cublasLtMatmulAlgo_t algo = chosen.algo;
  const cublasStatus_t status = chosen.status;
  destroy_descriptors(chosen);
  // This n's descriptors (build_plan's, which also asks the heuristic for
  // this n: its answer is dropped).
  build_plan(p, lt, [&] {
    GemmKey k = key;
    k.batch_invariant = false;
    return k;
  }(), workspace_bytes, bias);
  p.found = false;
  if (!found) {
    p.status = status;
    return;
  }
  const int32_t one = 1;
  const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
  DAPO_CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof(one)));
  DAPO_CUBLAS_CHECK(
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof(none)));
  cublasLtMatmulHeuristicResult_t check{};
  p.status = cublasLtMatmulAlgoCheck(lt, p.desc, p.a, p.b, p.c, p.c, &algo, &check);
  if (p.status != CUBLAS_STATUS_SUCCESS) return;
  DAPO_CHECK(check.workspaceSize <= workspace_bytes, "cuBLASLt algorithm wants ", check.workspaceSize,
             " bytes of workspace, ", workspace_bytes, " allowed");
  p.algo = algo;
  p.found = true;
}

void build_plan(GemmPlan& p, cublasLtHandle_t lt, const GemmKey& key, size_t workspace_bytes, const void* bias) {
  if (key.batch_invariant) return build_invariant_plan(p, lt, key, workspace_bytes, bias);
  // fp32 accumulation always; CUBLAS_COMPUTE_32F on f32 operands is true
  // fp32 (TF32 would need CUBLAS_COMPUTE_32F_FAST_TF32).
  DAPO_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  DAPO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  DAPO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (key.bias_epilogue) {
    const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    DAPO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    DAPO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  // Stored (pre-transpose) shapes, dense column-major.
  const uint64_t a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
  const uint64_t b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
  DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, key.ab_type, a_rows, a_cols, int64_t(a_rows)));
  DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, key.ab_type, b_rows, b_cols, int64_t(b_rows)));
  DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, key.cd_type, uint64_t(key.m), uint64_t(key.n), key.m));
  if (key.batch > 1) {
    DAPO_CHECK(key.stride_a >= 0 && key.stride_b >= 0 && key.stride_c >= 0 && key.stride_bias >= 0,
               "cuBLASLt batch strides must not be negative: A ", key.stride_a, " B ", key.stride_b, " C ",
               key.stride_c, " bias ", key.stride_bias);
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
        {p.a, key.stride_a}, {p.b, key.stride_b}, {p.c, key.stride_c}};
    for (const auto& [layout, stride] : layouts) {
      DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &key.batch,
                                                         sizeof(key.batch)));
      DAPO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                         &stride, sizeof(stride)));
    }
    if (key.bias_epilogue)
      DAPO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                       &key.stride_bias, sizeof(key.stride_bias)));
  }

  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes));
  // Split-K only with fp32 partials reduced in a separate pass. cuBLAS
  // documents bitwise reproducibility for every algorithm on one GPU model and
  // one stream; what INPLACE and OUTPUT_TYPE add is rounding: they keep the
  // partial sums in D's type, bf16 for most of our outputs.
  pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
           uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(key.align_a));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(key.align_b));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(key.align_c));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(key.align_c));

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.a, p.b, p.c, p.c, pref.p, 1, &result, &returned);
  // No algorithm is an answer, not an error: the caller has a way around a
  // bias epilogue cuBLASLt cannot do, and reports the rest.
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    p.status = st != CUBLAS_STATUS_SUCCESS ? st : returned == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state;
    return;
  }
  DAPO_CHECK(result.workspaceSize <= workspace_bytes, "cuBLASLt algorithm wants ", result.workspaceSize,
             " bytes of workspace, ", workspace_bytes, " allowed");
  p.algo = result.algo;
  p.found = true;
}

}  // namespace

const GemmPlan* gemm_plan_get(GemmPlanCache* cache, cublasLtHandle_t lt, const GemmKey& key,
                              size_t workspace_bytes, const void* bias) {
  DAPO_CHECK(cache != nullptr && lt != nullptr, "GEMM on a Ctx without a cuBLASLt handle or plan cache");
  auto it = cache->plans.find(key);
  if (it != cache->plans.end()) return &it->second;
  GemmPlan& p = cache->plans[key];
  build_plan(p, lt, key, workspace_bytes, bias);
  return &p;
}

}  // namespace dapo::ops::cuda
