// Harness cases of attention: the training / prefill kernels over packed
// sequences (forward and backward) and paged attention over the KV cache
// (decode, chunked prefill, every forced split of the split-KV kernels).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda/cuda_ops.h"
#include "dapo/ops/attention.h"
#include "dapo/ops/kv_cache.h"
#include "gpu/backend_ops.h"
#include "gpu/op_shapes.h"

namespace dapo::test::backend_ops {
namespace {

// ---- attention over packed sequences ----

using shapes::AttnShape;
using shapes::PagedCase;

std::string attn_name(const char* op, const AttnShape& s) {
  int64_t T = 0;
  for (int len : s.lens) T += len;
  return case_name({op, "bf16", "T" + std::to_string(T), "B" + std::to_string(s.lens.size()), dims({s.Hq, s.Hkv, s.D})});
}

struct AttnInputs {
  int64_t T = 0, B = 0, max_len = 0;
  std::vector<int32_t> cu;
  std::vector<float> q, k, v, dout;
};
AttnInputs attn_inputs(const AttnShape& s) {
  AttnInputs in;
  in.cu = {0};
  for (int len : s.lens) in.cu.push_back(in.cu.back() + len);
  in.T = in.cu.back();
  in.B = int64_t(s.lens.size());
  in.max_len = s.lens.empty() ? 0 : *std::max_element(s.lens.begin(), s.lens.end());
  // |q|, |k| up to 1.5: scores spread enough that softmax rows are far from uniform.
  in.q = bf16_exact(size_t(in.T * s.Hq * s.D), s.seed, -1.5f, 1.5f);
  in.k = bf16_exact(size_t(in.T * s.Hkv * s.D), s.seed + 1, -1.5f, 1.5f);
  in.v = bf16_exact(size_t(in.T * s.Hkv * s.D), s.seed + 2);
  in.dout = bf16_exact(size_t(in.T * s.Hq * s.D), s.seed + 3);
  return in;
}

// bf16 outputs and bf16-rounded P (and dS) for the tensor-core products:
// errors scale with the tensor, not the element (FlashAttention-2's), hence
// bounds relative to max |cpu| and a relative L2 bound; measured on H100 /
// H200 runs of these shapes.
const Bound kOutBound{"out", 5e-3, 2e-2,
                      "bf16 P (2^-8) in P.V and a bf16 output: 5e-3 of max|out| + 2e-2 relative, L2 1e-2"};
const Bound kLseBound{"lse", 1e-3, 0, "fp32 softmax statistics from bf16 tensor-core scores: 1e-3 absolute"};
Bound grad_bound(const char* name) {
  return {name, 1e-2, 3e-2, "bf16 P and dS in four products and bf16 outputs: 1e-2 of max + 3e-2 relative, L2 2e-2"};
}

void add_attention(Cases& cases, const AttnShape& s) {
  cases.push_back({attn_name("attention_forward", s),
                   {"attention_forward"},
                   "",
                   {kOutBound, kLseBound},
                   [=](Harness& h) {
                     AttnInputs in = attn_inputs(s);
                     const int64_t T = in.T, Hq = s.Hq, Hkv = s.Hkv, D = s.D, B = in.B;
                     const float scale = 1.0f / std::sqrt(float(D));
                     std::vector<float> out(size_t(T * Hq * D)), lse(size_t(Hq * T));
                     ops::attention_forward(h.cpu(), host(out, {T, Hq, D}), host(lse, {Hq, T}), host(in.q, {T, Hq, D}),
                                            host(in.k, {T, Hkv, D}), host(in.v, {T, Hkv, D}), host_t(in.cu, {B + 1}),
                                            in.max_len, scale);
                     Tensor g_out = h.guarded(DType::bf16, {T, Hq, D}), g_lse = h.guarded(DType::f32, {Hq, T});
                     ops::attention_forward(h.gpu(), g_out, g_lse, h.upload(in.q, {T, Hq, D}, DType::bf16),
                                            h.upload(in.k, {T, Hkv, D}, DType::bf16),
                                            h.upload(in.v, {T, Hkv, D}, DType::bf16), h.upload_raw(in.cu, {B + 1}),
                                            in.max_len, scale);
                     h.scaled("out", h.download(g_out), out, 1e-2);
                     h.close("lse", h.download(g_lse), lse);
                   }});
  // The backward of each backend from its own forward (out and lse as the
  // trainer keeps them).
  cases.push_back(
      {attn_name("attention_backward", s),
       {"attention_backward"},
       "",
       {grad_bound("dq"), grad_bound("dk"), grad_bound("dv")},
       [=](Harness& h) {
         AttnInputs in = attn_inputs(s);
         const int64_t T = in.T, Hq = s.Hq, Hkv = s.Hkv, D = s.D, B = in.B;
         const float scale = 1.0f / std::sqrt(float(D));
         std::vector<float> out(size_t(T * Hq * D)), lse(size_t(Hq * T)), dq(size_t(T * Hq * D)),
             dk(size_t(T * Hkv * D)), dv(size_t(T * Hkv * D));
         Tensor hcu = host_t(in.cu, {B + 1});
         ops::attention_forward(h.cpu(), host(out, {T, Hq, D}), host(lse, {Hq, T}), host(in.q, {T, Hq, D}),
                                host(in.k, {T, Hkv, D}), host(in.v, {T, Hkv, D}), hcu, in.max_len, scale);
         ops::attention_backward(h.cpu(), host(dq, {T, Hq, D}), host(dk, {T, Hkv, D}), host(dv, {T, Hkv, D}),
                                 host(in.dout, {T, Hq, D}), host(in.q, {T, Hq, D}), host(in.k, {T, Hkv, D}),
                                 host(in.v, {T, Hkv, D}), host(out, {T, Hq, D}), host(lse, {Hq, T}), hcu, in.max_len,
                                 scale);
         Tensor q = h.upload(in.q, {T, Hq, D}, DType::bf16), k = h.upload(in.k, {T, Hkv, D}, DType::bf16);
         Tensor v = h.upload(in.v, {T, Hkv, D}, DType::bf16), dout = h.upload(in.dout, {T, Hq, D}, DType::bf16);
         Tensor cu = h.upload_raw(in.cu, {B + 1});
         Tensor g_out = h.device_empty(DType::bf16, {T, Hq, D}), g_lse = h.device_empty(DType::f32, {Hq, T});
         ops::attention_forward(h.gpu(), g_out, g_lse, q, k, v, cu, in.max_len, scale);
         Tensor g_dq = h.guarded(DType::bf16, {T, Hq, D}), g_dk = h.guarded(DType::bf16, {T, Hkv, D}),
                g_dv = h.guarded(DType::bf16, {T, Hkv, D});
         ops::attention_backward(h.gpu(), g_dq, g_dk, g_dv, dout, q, k, v, g_out, g_lse, cu, in.max_len, scale);
         h.scaled("dq", h.download(g_dq), dq, 2e-2);
         h.scaled("dk", h.download(g_dk), dk, 2e-2);
         h.scaled("dv", h.download(g_dv), dv, 2e-2);
       }});
}

// ---- paged attention ----

using ops::cuda::detail::PagedSplit;

// A case's paged cache (shapes::paged_layout), queries spread over [-3, 3]
// (peaky softmax rows); with `split`, the GPU runs that spread over CTAs
// instead of its plan.
void run_paged(Harness& h, const PagedCase& c, const PagedSplit* split) {
  shapes::PagedLayout l = shapes::paged_layout(c);
  const int64_t B = l.B, Hq = c.Hq, Hkv = c.Hkv, D = c.D, BS = c.BS, NB = l.NB, max_blocks = l.max_blocks, N = l.N;
  const int64_t max_len = l.max_len;
  const uint32_t seed = c.seed;
  std::vector<int32_t>& table = l.table;
  std::vector<int32_t>& lens = l.lens;
  std::vector<int32_t>& cu = l.cu;
  const float scale = 1.0f / std::sqrt(float(D));
  auto kc = bf16_exact(size_t(NB * BS * Hkv * D), seed + 1), vc = bf16_exact(size_t(NB * BS * Hkv * D), seed + 2);
  auto q = bf16_exact(size_t(N * Hq * D), seed + 3, -3, 3);
  std::vector<float> want(size_t(N * Hq * D));
  ops::paged_attention(h.cpu(), host(want, {N, Hq, D}), host(q, {N, Hq, D}), host(kc, {NB, BS, Hkv, D}),
                       host(vc, {NB, BS, Hkv, D}), host_t(table, {B, max_blocks}), host_t(lens, {B}),
                       host_t(cu, {B + 1}), max_len, scale);
  Tensor dk = h.upload(kc, {NB, BS, Hkv, D}, DType::bf16), dv = h.upload(vc, {NB, BS, Hkv, D}, DType::bf16);
  Tensor dq = h.upload(q, {N, Hq, D}, DType::bf16);
  Tensor dt = h.upload_raw(table, {B, max_blocks}), dl = h.upload_raw(lens, {B}), dcu = h.upload_raw(cu, {B + 1});
  Tensor out = h.guarded(DType::bf16, {N, Hq, D});
  if (split != nullptr)
    ops::cuda::detail::paged_attention_with_split(h.gpu(), out, dq, dk, dv, dt, dl, dcu, max_len, scale, *split);
  else
    ops::paged_attention(h.gpu(), out, dq, dk, dv, dt, dl, dcu, max_len, scale);
  const auto got = h.download(out);
  h.finite("out", got);
  h.close("out", got, want);
}

const Bound kPagedBound{"out", 6e-3, 1e-2,
                        "bf16 q.K and P.V on the tensor cores (P rounded to bf16, 2^-8) and a bf16 output over fp32 "
                        "statistics: 1e-2 relative, 6e-3 absolute for the small outputs of peaky rows"};

std::string paged_name(const PagedCase& c) {
  int64_t N = 0;
  for (int n : c.nq) N += n;
  const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
  return case_name({"paged_attention", "bf16", dims({c.Hq, c.Hkv, c.D}), "bs" + std::to_string(c.BS),
                    "B" + std::to_string(c.lens.size()), "N" + std::to_string(N), "ctx" + std::to_string(max_len),
                    "s" + std::to_string(c.seed)});
}

void add_paged(Cases& cases, const PagedCase& c) {
  cases.push_back({paged_name(c), {"paged_attention"}, "", {kPagedBound}, [=](Harness& h) {
                     run_paged(h, c, nullptr);
                   }});
}

// Every cluster size with one and several merge groups, both kernels
// (registers: stages 0; shared memory: 2, 3): ragged batches where some
// CTAs of a cluster, or whole merge groups, lie past a sequence's end; a
// GQA group of 12 (two row tiles, two cluster merges per CTA); block size
// 24; prefill rows through clusters (qsplit 3).
void add_paged_split(Cases& cases, int64_t stages, int64_t cluster, int64_t groups) {
  cases.push_back(
      {case_name({"paged_attention_split", "bf16", "stages" + std::to_string(stages), "cluster" + std::to_string(cluster),
                  "groups" + std::to_string(groups)}),
       {},
       "cuda::detail::paged_attention_with_split",
       {kPagedBound},
       [=](Harness& h) {
         PagedSplit sp;
         sp.groups = groups;
         sp.cluster = cluster;
         sp.stages = stages;
         PagedSplit pre = sp;
         pre.qsplit = 3;
         const std::vector<PagedCase> runs = shapes::paged_split_cases();
         for (size_t i = 0; i < runs.size(); ++i) {
           const PagedSplit* split = i + 2 < runs.size() ? &sp : &pre;  // the last two: prefill rows
           SCOPED_TRACE(testing::Message() << "seed " << runs[i].seed << " qsplit " << split->qsplit);
           run_paged(h, runs[i], split);
           if (::testing::Test::HasFailure()) return;
         }
       }});
}

}  // namespace

void add_attention_cases(Cases& cases) {
  for (const AttnShape& s : shapes::attention_shapes()) add_attention(cases, s);

  for (const PagedCase& c : shapes::paged_cases()) add_paged(cases, c);
  for (const int64_t stages : {0, 2, 3})
    for (const int64_t cluster : {1, 2, 4, 8})
      for (const int64_t groups : {1, 3}) add_paged_split(cases, stages, cluster, groups);
  // The launch without programmatic dependent launch.
  cases.push_back({"paged_attention_split_bf16_no_pdl_cluster2",
                   {},
                   "cuda::detail::paged_attention_with_split",
                   {kPagedBound},
                   [](Harness& h) {
                     PagedSplit plain;
                     plain.cluster = 2;
                     plain.pdl = false;
                     run_paged(h, shapes::paged_no_pdl_case(), &plain);
                   }});
}

}  // namespace dapo::test::backend_ops
