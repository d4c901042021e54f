// CPU reference of causal GQA attention over packed sequences (fp32).
// Forward: one (query row, head) per work item, scores of that row in a
// per-thread scratch row, exact softmax in two passes over the row.
// Backward: flash-attention's recomputation from lse, split into a pass
// over query rows (dq) and a pass over key rows (dk, dv) so that every
// output element is written by exactly one thread: no atomics, no
// reduction across threads, the same bits for any number of threads.
#include "dapo/ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "attention_row.h"
#include "cu_seqlens.h"
#include "src/ops/contract.h"
#include "src/ops/cpu/cpu_ops.h"

namespace dapo::ops::cpu {
namespace {

using detail::attend_row;
using detail::axpy;
using detail::check_cu_seqlens;
using detail::dot;
using detail::sequence_of;

using ops::detail::check_dtype;

}  // namespace

void attention_forward(const Ctx& ctx, Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                       Tensor cu_seqlens, int64_t max_seqlen, float scale) {
  // ops::attention_forward checked the contract; the reference computes in
  // f32 (the other tensors have q's dtype).
  check_dtype("attention_forward on the CPU", q, DType::f32, "q");
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  const int64_t B = cu_seqlens.shape[0] - 1, group = Hq / Hkv;
  // The offsets are read here, on the host: only this backend can check them.
  const int32_t* cu = cu_seqlens.ptr<int32_t>();  // (B+1)
  const int64_t max_len = check_cu_seqlens("attention_forward", "cu_seqlens", cu, B, T, "T");
  DAPO_CHECK(max_len <= max_seqlen, "attention_forward: a sequence of ", max_len, " tokens, max_seqlen = ", max_seqlen);
  if (T == 0 || Hq == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "attention_forward needs ctx.scratch");

  float* o = out.ptr<float>();            // (T, Hq, D)
  float* ls = lse.ptr<float>();           // (Hq, T)
  const float* qp = q.ptr<float>();       // (T, Hq, D)
  const float* kp = k.ptr<float>();       // (T, Hkv, D)
  const float* vp = v.ptr<float>();       // (T, Hkv, D)

  ArenaScope scope(*ctx.scratch);
  const int nthreads = omp_get_max_threads();
  float* scores = ctx.scratch->alloc_array<float>(size_t(nthreads) * size_t(max_len));  // (nthreads, max_len)

  const int64_t rows = T * Hq;
#pragma omp parallel num_threads(nthreads)
  {
    float* s = scores + size_t(omp_get_thread_num()) * size_t(max_len);  // (max_len)
    // Causal rows differ in length; small dynamic chunks keep threads busy.
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r / Hq, h = r % Hq, g = h / group;
      const int64_t start = cu[sequence_of(cu, B, i)];
      const int64_t n = i - start + 1;  // keys start..i
      const detail::RowSoftmax sm = attend_row(
          o + (i * Hq + h) * D, qp + (i * Hq + h) * D, n, D, scale, s,
          [&](int64_t j) { return kp + ((start + j) * Hkv + g) * D; },
          [&](int64_t j) { return vp + ((start + j) * Hkv + g) * D; });
      ls[h * T + i] = sm.max + std::log(sm.sum);
    }
  }
}

void attention_backward(const Ctx& ctx, Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                        Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens, int64_t max_seqlen, float scale) {
  check_dtype("attention_backward on the CPU", q, DType::f32, "q");
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  const int64_t B = cu_seqlens.shape[0] - 1, group = Hq / Hkv;
  const int32_t* cu = cu_seqlens.ptr<int32_t>();  // (B+1)
  const int64_t max_len = check_cu_seqlens("attention_backward", "cu_seqlens", cu, B, T, "T");
  DAPO_CHECK(max_len <= max_seqlen, "attention_backward: a sequence of ", max_len, " tokens, max_seqlen = ", max_seqlen);
  if (T == 0 || Hq == 0) return;
  DAPO_CHECK(ctx.scratch != nullptr, "attention_backward needs ctx.scratch");

  float* dqp = dq.ptr<float>();            // (T, Hq, D)
  float* dkp = dk.ptr<float>();            // (T, Hkv, D)
  float* dvp = dv.ptr<float>();            // (T, Hkv, D)
  const float* dop = dout.ptr<float>();    // (T, Hq, D)
  const float* qp = q.ptr<float>();        // (T, Hq, D)
  const float* kp = k.ptr<float>();        // (T, Hkv, D)
  const float* vp = v.ptr<float>();        // (T, Hkv, D)
  const float* op = out.ptr<float>();      // (T, Hq, D)
  const float* ls = lse.ptr<float>();      // (Hq, T)

  ArenaScope scope(*ctx.scratch);
  // delta_i = dout_i . out_i = sum_j P_ij dP_ij, the softmax-backward term
  // of row i; the key pass needs it for every row of the sequence.
  float* delta = ctx.scratch->alloc_array<float>(size_t(Hq * T));  // (Hq, T)

#pragma omp parallel
  {
    // Query pass: dq_i = scale * sum_{j <= i} P_ij (dout_i . v_j - delta_i) k_j.
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < T * Hq; ++r) {
      const int64_t i = r / Hq, h = r % Hq, g = h / group;
      const int64_t start = cu[sequence_of(cu, B, i)];
      const float* qi = qp + (i * Hq + h) * D;
      const float* doi = dop + (i * Hq + h) * D;
      const float lse_i = ls[h * T + i];
      const float delta_i = dot(doi, op + (i * Hq + h) * D, D);
      delta[h * T + i] = delta_i;
      float* dqi = dqp + (i * Hq + h) * D;
      std::fill(dqi, dqi + D, 0.0f);
      for (int64_t j = start; j <= i; ++j) {
        const float* kj = kp + (j * Hkv + g) * D;
        const float p = std::exp(scale * dot(qi, kj, D) - lse_i);
        const float ds = p * (dot(doi, vp + (j * Hkv + g) * D, D) - delta_i);
        axpy(dqi, scale * ds, kj, D);
      }
    }
    // (implicit barrier: delta is complete)
    // Key pass: dk_j = scale * sum_{h in group} sum_{i >= j} dS_ij q_i,
    //           dv_j = sum_{h in group} sum_{i >= j} P_ij dout_i.
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < T * Hkv; ++r) {
      const int64_t j = r / Hkv, g = r % Hkv;
      const int64_t end = cu[sequence_of(cu, B, j) + 1];
      const float* kj = kp + (j * Hkv + g) * D;
      const float* vj = vp + (j * Hkv + g) * D;
      float* dkj = dkp + (j * Hkv + g) * D;
      float* dvj = dvp + (j * Hkv + g) * D;
      std::fill(dkj, dkj + D, 0.0f);
      std::fill(dvj, dvj + D, 0.0f);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (int64_t i = j; i < end; ++i) {
          const float* qi = qp + (i * Hq + h) * D;
          const float* doi = dop + (i * Hq + h) * D;
          const float p = std::exp(scale * dot(qi, kj, D) - ls[h * T + i]);
          const float ds = p * (dot(doi, vj, D) - delta[h * T + i]);
          axpy(dvj, p, doi, D);
          axpy(dkj, scale * ds, qi, D);
        }
      }
    }
  }
}

}  // namespace dapo::ops::cpu
