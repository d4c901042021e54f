// The fused gate/up + SwiGLU plans, on the host (swiglu_plan.h). The rules
// were measured on an H100 SXM (`bench_ops_gpu --op linear_swiglu [--sweep]`;
// the sweeps were tests/gpu perf tests then).
#include "dapo/ops/plan/swiglu_plan.h"

#include <algorithm>

#include "dapo/ops/plan/gemv_plan.h"

namespace dapo::ops::plan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// Where the fused launch beat the product then swiglu_forward in
// `bench_ops_gpu --op linear_swiglu --sweep` (H100, CUDA graphs, cold L2; us fused / unfused): up
// to 128 rows on every Qwen2.5 shape (128 rows: 0.5B 10.2 / 11.2, 1.5B
// 23.8 / 28.4, 7B 99.6 / 111.1; 1 row: 0.5B 9.3 / 11.2, 7B 94.8 / 98.9), and
// at 256 rows only on small matrices (0.5B 11.4 / 13.6; 1.5B 33.6 / 31.3,
// 7B 150.6 / 124.1: every CTA then reads 256 input rows of all of K).
bool swiglu_fused_preferred(int64_t M, int64_t K, int64_t I) {
  return M >= 1 && (M <= 128 || (M <= 256 && I * K <= (int64_t(8) << 20)));
}

// 64 input rows a CTA up to 64 rows, else 128; tiles of 40 h columns (80
// weight rows), or 80 for large matrices at up to 64 rows. The H100 sweep of
// every width (`--op linear_swiglu --sweep`) had 40 best or within 4% of the best on
// every Qwen2.5 shape at 1 to 128 rows but 7B at up to 64 rows, where 80 was
// (1 row: 94.8 us against 103.9). The widths' CTA counts alone do not rank
// them: 1.5B at 128 rows ran 224 CTAs of 40 columns in 23.8 us and 112 of
// 80 in 28.1, though each SM then reads more input rows.
SwigluPlan swiglu_fused_plan(int64_t M, int64_t K, int64_t I, int sm_count) {
  SwigluPlan p;
  p.rows = M <= 64 ? 64 : 128;
  p.cols = p.rows == 64 && I * K >= (int64_t(48) << 20) ? 80 : 40;
  // A deep ring where the grid is one CTA an SM at most (H100, 0.5B decode
  // graph at 128 rows, 122 CTAs: 1.379 -> 1.331 ms a step); not where two
  // CTAs an SM must share it (1.5B, 224 CTAs: 2.657 -> 2.75).
  p.deep = ceil_div(I, p.cols) * ceil_div(std::max<int64_t>(M, 1), p.rows) <= sm_count;
  return p;
}

// Where the wide kernel beat cuBLASLt's gate/up product then
// swiglu_forward on an H100 (`--op linear_swiglu`, us wide /
// unfused): Qwen2.5-0.5B from 1,024 rows (1,024: 35.9 / 37.0; 4,096: 110.7
// / 149.5; 32,768: 818 / 1,076), not at 512 (24.9 / 19.8). Not where the
// two weights (17 MB at 0.5B) outgrow the 50 MB L2 and every item's boxes
// come from HBM: 1.5B (55 MB) at 4,096 rows 414 / 360, 7B 3,014 / 1,535.
bool swiglu_wide_preferred(int64_t M, int64_t K, int64_t I, bool built) {
  return built && M >= 1024 && I >= kSwigluWideCols && K >= 2 * kSwigluBK && 4 * I * K <= (int64_t(24) << 20);
}

// Where it was measured faster (H100, decode graph at 128 rows, norm_fold.h):
// gate/up's fused tile has the rstd warp (one CTA an SM: a deep plan) and,
// above 64 rows, o_proj's fold (C x C) runs in one wave; the folded
// products store 4 adjacent outputs of a row (C % 4 == 0).
// Not where the small-batch kernel (gemv_plan.h) takes gate/up: it reads
// normed rows.
bool norm_fold_preferred(int64_t M, int64_t C, int64_t I, const SkinnyGpu& gpu) {
  if (M < 1 || M > 128 || C % 4 != 0) return false;
  if (gemv_swiglu_preferred(M, C, I)) return false;
  if (!swiglu_fused_preferred(M, C, I) || !swiglu_fused_plan(M, C, I, gpu.sm_count).deep) return false;
  return M <= 64 || residual_fold_one_wave(M, C, C, gpu);
}

}  // namespace dapo::ops::plan
