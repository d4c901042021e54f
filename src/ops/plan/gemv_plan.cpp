// The small-batch product's launch plan (gemv_plan.h).
#include "dapo/ops/plan/gemv_plan.h"

#include <algorithm>

namespace dapo::ops::plan {

GemvPlan gemv_plan(int64_t K, std::span<const int64_t> rows) {
  GemvPlan p;
  const int64_t pieces = (K + kGemvVector - 1) / kGemvVector;
  p.threads = std::clamp<int64_t>((pieces + 31) / 32 * 32, 32, kGemvMaxThreads);
  for (const int64_t r : rows) p.ctas += gemv_segment_ctas(r);
  return p;
}

// From `bench_ops_gpu --op linear_multi --shape M=1:2:4:8` on an H200
// (2026-11-29; weights rotating through 1 GB so that they come from HBM),
// us small-batch / the skinny kernel / cuBLASLt:
// - 1 row: faster on every Qwen2.5 product, 0.5B to 7B and the LM heads
//   (1.5B: q/k/v 2.7 / 5.1 / 11.1, gate/up 14.0 / 18.7 / 16.5, down 8.4 /
//   12.6 / 11.5, LM head 104.9 / 115.4 / 113.8);
// - 2 rows: faster up to 7B's q (26 MB: 10.5 / 11.0 / 10.9), slower on
//   1.5B's gate/up (55 MB: 17.3 / 18.7 / 16.6) and the LM heads;
// - 4 rows: faster up to 1.5B's q/k/v (6.3 MB: 4.5 / 5.5 / 11.1), slower
//   from 7B-tp2's q (12.8 MB: 6.7 / 6.1 / 7.9);
// - 8 rows: faster on k alone and the small q/k/v (1.5B k: 1.9 / 3.4 / 4.5),
//   level at 4-5 MB (1.5B o: 4.4 / 4.2 / 4.9).
bool gemv_preferred(int64_t M, int64_t K, std::span<const int64_t> rows) {
  if (M < 1 || M > kGemvMaxRows || K < kGemvVector) return false;
  int64_t n = 0;
  for (const int64_t r : rows) n += r;
  if (n <= 0) return false;
  const double bytes = 2.0 * double(n) * double(K);
  if (M == 1) return true;
  if (M == 2) return bytes <= 32e6;
  if (M <= 4) return bytes <= 8e6;
  return bytes <= 4e6;
}

// `--op linear_swiglu --shape M=1:2:4`, same card and day, us small-batch
// (2 gate and 2 up rows a CTA) / the fused kernel: 1 row 5.6 / 7.9 (0.5B),
// 13.7 / 20.5 (1.5B), 32.9 / 45.3 (7B-tp2), 62.3 / 74.7 (7B); 2 rows 6.7 /
// 7.7, 17.0 / 20.4, 39.3 / 45.7, but 77.0 / 73.7 on 7B's 271 MB; from 4 rows
// the fused kernel (1.5B: 22.8 / 20.6).
bool gemv_swiglu_preferred(int64_t M, int64_t K, int64_t I) {
  if (M < 1 || M > 2 || K < kGemvVector || I < 1) return false;
  return M == 1 || 4.0 * double(I) * double(K) <= 200e6;  // the two weights
}

}  // namespace dapo::ops::plan
