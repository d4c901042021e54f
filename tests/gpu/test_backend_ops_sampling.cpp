// Harness cases of the LM head's consumers: log-prob + entropy (the
// single-shard forward, the three vocab-parallel passes, the backward, two
// shards combined), next-token sampling (many rows and parameter sets, the
// untruncated sampler's edge rows, logit_rows), the tp shard ops composed on
// each backend, the fused LM head + sampling, and the device Philox draw.
//
// Tokens: the CUDA sampler's token equals the CPU's except where the draw u
// falls within float rounding of a CDF boundary (the backends round exp
// differently; sampling.h): a "tokens" bound allows atol + rtol * rows
// differing rows, and the log-probs of the rows that agree must be close.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>

#include "cuda/cuda_ops.h"
#include "dapo/core/rng.h"
#include "dapo/ops/lm_head_sample.h"
#include "dapo/ops/logprob.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/sampling.h"
#include "dapo/ops/sampling_select.h"
#include "gpu/backend_ops.h"
#include "gpu/op_shapes.h"
#include "gpu/tp_sampling_emulation.h"
#include "mpi/sampling_tp_cases.h"

namespace dapo::test::backend_ops {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
std::string dtn(DType dt) { return dtype_name(dt); }

// ---- log-prob + entropy ----

using shapes::LpCase;

std::vector<int32_t> make_targets(const LpCase& c, uint32_t seed) { return shapes::logprob_targets(c, seed); }
std::vector<float> make_logits(const LpCase& c, uint32_t seed) {
  auto x = bf16_exact(size_t(c.N * c.V), seed, -c.range, c.range);
  if (c.masked)
    for (int64_t i = 0; i < c.N * c.V; ++i)
      if (shapes::logprob_masked(i % c.V)) x[size_t(i)] = -kInf;
  return x;
}

std::string lp_shape(const LpCase& c) {
  return case_name({dtn(c.dtype), "N" + std::to_string(c.N), "V" + std::to_string(c.V),
                    "start" + std::to_string(c.vocab_start), c.inv_t == 1.0f ? "t1" : "t0_7",
                    "range" + std::to_string(int(c.range)), c.masked ? "masked" : ""});
}

// fp32 chunk sums (the CPU: double): 1e-4 absolute on values of ~10.
const std::string kFwdWhy = "fp32 chunk sums and expf against the CPU's double sums: 1e-4 on values up to ~40";

void add_logprob(Cases& cases, const LpCase& c) {
  const uint32_t seed = c.seed;
  auto cpu_forward = [=](Harness& h, std::vector<float>& logits, std::vector<int32_t>& targets, std::vector<float>& lp,
                         std::vector<float>& ent, std::vector<float>& lse) {
    lp.assign(size_t(c.N), 0), ent.assign(size_t(c.N), 0), lse.assign(size_t(c.N), 0);
    ops::logprob_entropy_forward(h.cpu(), host(lp, {c.N}), host(ent, {c.N}), host(lse, {c.N}),
                                 host(logits, {c.N, c.V}), host_t(targets, {c.N}), c.vocab_start, c.inv_t);
  };
  const std::vector<Bound> fwd = {{"logprob", 1e-4, 1e-5, kFwdWhy}, {"entropy", 1e-4, 1e-5, kFwdWhy},
                                  {"lse", 1e-4, 1e-5, kFwdWhy}};
  cases.push_back({case_name({"logprob_entropy_forward", lp_shape(c)}),
                   {"logprob_entropy_forward"},
                   "",
                   fwd,
                   [=](Harness& h) {
                     auto logits = make_logits(c, seed);
                     auto targets = make_targets(c, seed + 1);
                     std::vector<float> lp, ent, lse;
                     cpu_forward(h, logits, targets, lp, ent, lse);
                     Tensor glp = h.guarded(DType::f32, {c.N}), gent = h.guarded(DType::f32, {c.N}),
                            glse = h.guarded(DType::f32, {c.N});
                     ops::logprob_entropy_forward(h.gpu(), glp, gent, glse, h.upload(logits, {c.N, c.V}, c.dtype),
                                                  h.upload_raw(targets, {c.N}), c.vocab_start, c.inv_t);
                     h.close("logprob", h.download(glp), lp);
                     h.close("entropy", h.download(gent), ent);
                     h.close("lse", h.download(glse), lse);
                   }});
  // Passes 1-3 on one shard holding the whole vocabulary (no all-reduce needed).
  cases.push_back({case_name({"logprob_three_pass", lp_shape(c)}),
                   {"logits_row_max", "logits_partial_sums", "logprob_entropy_finish"},
                   "",
                   fwd,
                   [=](Harness& h) {
                     auto logits = make_logits(c, seed);
                     auto targets = make_targets(c, seed + 1);
                     std::vector<float> lp, ent, lse;
                     cpu_forward(h, logits, targets, lp, ent, lse);
                     Tensor x = h.upload(logits, {c.N, c.V}, c.dtype), t = h.upload_raw(targets, {c.N});
                     Tensor row_max = h.guarded(DType::f32, {c.N}), sums = h.guarded(DType::f32, {c.N, 3});
                     Tensor glp = h.guarded(DType::f32, {c.N}), gent = h.guarded(DType::f32, {c.N}),
                            glse = h.guarded(DType::f32, {c.N});
                     ops::logits_row_max(h.gpu(), row_max, x, c.inv_t);
                     ops::logits_partial_sums(h.gpu(), sums, x, t, row_max, c.vocab_start, c.inv_t);
                     ops::logprob_entropy_finish(h.gpu(), glp, gent, glse, sums, row_max);
                     h.close("logprob", h.download(glp), lp);
                     h.close("entropy", h.download(gent), ent);
                     h.close("lse", h.download(glse), lse);
                   }});
  // The backward from the CPU's lse and entropy, so that only the kernel
  // differs; either upstream gradient may be absent.
  cases.push_back(
      {case_name({"logprob_entropy_backward", lp_shape(c), c.dlogprob ? "dlogprob" : "", c.dentropy ? "dentropy" : ""}),
       {"logprob_entropy_backward"},
       "",
       {{"dlogits", 5e-6, c.dtype == DType::bf16 ? 8e-3 : 1e-5,
         c.dtype == DType::bf16 ? "bf16 output: one rounding (2^-8), twice; atol: cancellation of O(10) terms near p = 1"
                                : "f32: exp2 approximation and FMA; atol: cancellation of O(10) terms near p = 1"}},
       [=](Harness& h) {
         auto logits = make_logits(c, seed);
         auto targets = make_targets(c, seed + 1);
         auto glp = bf16_exact(size_t(c.N), seed + 2, -1, 1), gent = bf16_exact(size_t(c.N), seed + 3, -1, 1);
         std::vector<float> lp, ent, lse, dx(size_t(c.N * c.V));
         cpu_forward(h, logits, targets, lp, ent, lse);
         ops::logprob_entropy_backward(h.cpu(), host(dx, {c.N, c.V}), c.dlogprob ? host(glp, {c.N}) : Tensor{},
                                       c.dentropy ? host(gent, {c.N}) : Tensor{}, host(logits, {c.N, c.V}),
                                       host_t(targets, {c.N}), host(lse, {c.N}), host(ent, {c.N}), c.vocab_start,
                                       c.inv_t);
         Tensor gdx = h.guarded(c.dtype, {c.N, c.V});
         ops::logprob_entropy_backward(h.gpu(), gdx, c.dlogprob ? h.upload(glp, {c.N}) : Tensor{},
                                       c.dentropy ? h.upload(gent, {c.N}) : Tensor{},
                                       h.upload(logits, {c.N, c.V}, c.dtype), h.upload_raw(targets, {c.N}),
                                       h.upload(lse, {c.N}), h.upload(ent, {c.N}), c.vocab_start, c.inv_t);
         h.close("dlogits", h.download(gdx), dx);
       }});
}

// The tensor-parallel forward by hand: two shards of the vocabulary, pass 1
// on each, a host max (the MAX all-reduce), pass 2 on each, a host sum (the
// SUM all-reduce), pass 3; against the CPU's single-shard forward.
void add_logprob_two_shards(Cases& cases, int64_t N, int64_t V, int64_t V0, float range, float inv_t) {
  const std::string why =
      "the single-shard forward's 1e-4 against the CPU (fp32 chunk sums) and 2e-5 more for the shards' "
      "fp32 partial sums added on the host";
  cases.push_back(
      {case_name({"logprob_two_shards", "bf16", "N" + std::to_string(N), "V" + std::to_string(V),
                  "split" + std::to_string(V0), "range" + std::to_string(int(range)), inv_t == 1.0f ? "t1" : "t0_7"}),
       {"logits_row_max", "logits_partial_sums", "logprob_entropy_finish"},
       "",
       {{"logprob", 1e-4, 1e-5, "the bound the sharded log-prob had against the CPU (H100/H200 runs): fp32 chunk "
                                 "sums and expf against the CPU's double sums"},
        {"entropy", 1.2e-4, 1e-5, why},
        {"lse", 1.2e-4, 1e-5, why}},
       [=](Harness& h) {
         const int64_t V1 = V - V0;
         const LpCase whole{N, V, 0, inv_t, range, true, true, DType::bf16};
         auto logits = make_logits(whole, 5);
         auto targets = make_targets(whole, 6);
         std::vector<float> a(size_t(N * V0)), b(size_t(N * V1));
         for (int64_t n = 0; n < N; ++n) {
           std::copy_n(logits.begin() + n * V, V0, a.begin() + n * V0);
           std::copy_n(logits.begin() + n * V + V0, V1, b.begin() + n * V1);
         }
         Tensor xa = h.upload(a, {N, V0}, DType::bf16), xb = h.upload(b, {N, V1}, DType::bf16);
         Tensor t = h.upload_raw(targets, {N});
         Tensor ma = h.guarded(DType::f32, {N}), mb = h.guarded(DType::f32, {N});
         ops::logits_row_max(h.gpu(), ma, xa, inv_t);
         ops::logits_row_max(h.gpu(), mb, xb, inv_t);
         auto m = h.download(ma);
         const auto mbh = h.download(mb);
         for (int64_t n = 0; n < N; ++n) m[size_t(n)] = std::max(m[size_t(n)], mbh[size_t(n)]);
         Tensor gm = h.upload(m, {N});
         Tensor sa = h.guarded(DType::f32, {N, 3}), sb = h.guarded(DType::f32, {N, 3});
         ops::logits_partial_sums(h.gpu(), sa, xa, t, gm, 0, inv_t);
         ops::logits_partial_sums(h.gpu(), sb, xb, t, gm, V0, inv_t);
         auto sums = h.download(sa);
         const auto sbh = h.download(sb);
         for (int64_t i = 0; i < N * 3; ++i) sums[size_t(i)] += sbh[size_t(i)];
         Tensor glp = h.guarded(DType::f32, {N}), gent = h.guarded(DType::f32, {N}), glse = h.guarded(DType::f32, {N});
         ops::logprob_entropy_finish(h.gpu(), glp, gent, glse, h.upload(sums, {N, 3}), gm);
         std::vector<float> lp(static_cast<size_t>(N)), ent(static_cast<size_t>(N)), lse(static_cast<size_t>(N));
         ops::logprob_entropy_forward(h.cpu(), host(lp, {N}), host(ent, {N}), host(lse, {N}), host(logits, {N, V}),
                                      host_t(targets, {N}), 0, inv_t);
         h.close("logprob", h.download(glp), lp);
         h.close("entropy", h.download(gent), ent);
         h.close("lse", h.download(glse), lse);
       }});
}

// ---- sampling ----

using shapes::sampling_params;
void make_keys(int64_t B, uint32_t seed, std::vector<int64_t>& streams, std::vector<int64_t>& counters) {
  shapes::sampling_keys(B, seed, streams, counters);
}

// Every token an id in [0, V) with a finite log-prob; where the tokens
// agree, the log-probs within the "logprob" bound. Returns the rows whose
// token differs.
int64_t compare_tokens(Harness& h, const std::vector<int32_t>& got, const std::vector<float>& got_lp,
                       const std::vector<int32_t>& want, const std::vector<float>& want_lp, int64_t V) {
  const Bound& b = h.bound("logprob");
  EXPECT_EQ(got.size(), want.size());
  int64_t bad = 0;
  for (size_t r = 0; r < got.size() && r < want.size(); ++r) {
    EXPECT_GE(got[r], 0) << "row " << r;
    EXPECT_LT(got[r], V) << "row " << r;
    EXPECT_TRUE(std::isfinite(got_lp[r])) << "row " << r;
    if (got[r] != want[r]) {
      ++bad;
      continue;
    }
    EXPECT_NEAR(got_lp[r], want_lp[r], b.atol + b.rtol * std::fabs(want_lp[r])) << "row " << r << " (" << b.why << ")";
  }
  return bad;
}
// The "tokens" bound: at most atol + rtol * rows rows differ over a case.
void expect_disagreements(Harness& h, int64_t bad, int64_t rows) {
  const Bound& b = h.bound("tokens");
  EXPECT_LE(double(bad), b.atol + b.rtol * double(rows))
      << bad << " of " << rows << " sampled rows differ from the CPU (" << b.why << ")";
}

const Bound kTokensBound{"tokens", 1, 1e-3,
                         "rows where u falls within float rounding of a CDF boundary (rare: ~1e-6 relative slivers): "
                         "at most 1 + 1/1000 of the sampled rows; greedy and top-1 rows always agree"};
const Bound kLogprobBound{"logprob", 1e-5, 1e-6,
                          "log-softmax of the chosen token: fp32 exp (the GPU's to 2 ulp) summed in double: 1e-5"};

struct Sampled {
  std::vector<int32_t> tok;
  std::vector<float> lp;
};
Sampled cpu_sample(Harness& h, std::vector<float>& logits, int64_t B, int64_t V, std::vector<int32_t>* rows,
                   std::vector<int64_t>& streams, std::vector<int64_t>& counters, const ops::SamplingParams& p) {
  const int64_t R = rows ? int64_t(rows->size()) : B;
  Sampled s{std::vector<int32_t>(static_cast<size_t>(R)), std::vector<float>(static_cast<size_t>(R))};
  ops::sample_tokens(h.cpu(), host_t(s.tok, {R}), host(s.lp, {R}), host(logits, {B, V}),
                     rows ? host_t(*rows, {R}) : Tensor{}, host_t(streams, {R}), host_t(counters, {R}), p);
  return s;
}
Sampled gpu_sample(Harness& h, Tensor logits, Tensor rows, Tensor streams, Tensor counters,
                   const ops::SamplingParams& p) {
  const int64_t R = streams.numel();
  Tensor t = h.guarded(DType::i32, {R}), l = h.guarded(DType::f32, {R});
  ops::sample_tokens(h.gpu(), t, l, logits, rows, streams, counters, p);
  return {h.download_raw<int32_t>(t), h.download(l)};
}

// Many rows and parameter sets: (256, 1000), (128, 151936) and (7, 3),
// f32 and bf16 logits in [-4, 4) scaled by 1, 2 or 4 per row (flat to
// peaked; bf16 values give many exact ties), rows 0-2 with the max tied
// across several ids; greedy, T 0.7 and 1 with top-k 0, 1, 50 and top-p 1,
// 0.9, 0.5.
void add_sample_many_rows(Cases& cases) {
  cases.push_back(
      {"sample_tokens_f32_bf16_many_rows_and_params",
       {"sample_tokens"},
       "",
       {kTokensBound, kLogprobBound, {"greedy_tokens", 0, 0, "greedy and top-1 rows: the argmax, exactly"}},
       [](Harness& h) {
         int64_t sampled_rows = 0, disagreements = 0;
         for (const auto& [B, V] : shapes::many_rows_shapes()) {
           shapes::SampleRows rows = shapes::many_rows(B, V, bf16_exact);
           std::vector<float>& logits = rows.logits;
           std::vector<int64_t>&streams = rows.streams, &counters = rows.counters;
           Tensor ds = h.upload_raw(streams, {B}), dc = h.upload_raw(counters, {B});
           for (const DType dt : {DType::f32, DType::bf16}) {
             Tensor dl = h.upload(logits, {B, V}, dt);
             for (const ops::SamplingParams& p : shapes::many_rows_params()) {
               SCOPED_TRACE(testing::Message() << "B " << B << " V " << V << " " << dtype_name(dt) << " T "
                                               << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p);
               const Sampled want = cpu_sample(h, logits, B, V, nullptr, streams, counters, p);
               const Sampled got = gpu_sample(h, dl, Tensor{}, ds, dc, p);
               const int64_t bad = compare_tokens(h, got.tok, got.lp, want.tok, want.lp, V);
               if (p.temperature == 0.0f || p.top_k == 1) h.same("greedy_tokens", got.tok, want.tok);
               if (p.temperature != 0.0f) {
                 sampled_rows += B;
                 disagreements += bad;
               }
             }
           }
         }
         expect_disagreements(h, disagreements, sampled_rows);
       }});
}

// Without top-k/top-p the CUDA op reads the row once in 32 contiguous id
// ranges and walks only the range the draw falls in. Rows that put the
// draw at the ends: one huge logit at id 0 or V - 1, the mass in the last
// ids, only the last id finite, -inf logits (weight 0, no flag: at id 0,
// scattered, trailing), all equal, huge logits on both sides of every range
// boundary, a second half that underflows in float (-200) or only in double
// (-120), spread x8; draws u near 0 and near 1 for half the rows; odd V.
void add_sample_untruncated_edges(Cases& cases) {
  cases.push_back(
      {"sample_tokens_f32_bf16_untruncated_row_edges",
       {"sample_tokens"},
       "",
       {kTokensBound, kLogprobBound,
        {"exact_rows", 0, 0, "greedy rows, one huge logit, one finite logit: one possible token, exactly"}},
       [](Harness& h) {
         int64_t sampled_rows = 0, disagreements = 0;
         for (const int64_t V : shapes::kEdgeRowsVocabs) {
           const int64_t B = 128;
           shapes::SampleRows rows = shapes::edge_rows(V, bf16_exact);
           std::vector<float>& logits = rows.logits;
           std::vector<int64_t>&streams = rows.streams, &counters = rows.counters;
           const std::vector<int>& kind = rows.kind;
           Tensor ds = h.upload_raw(streams, {B}), dc = h.upload_raw(counters, {B});
           for (const DType dt : {DType::f32, DType::bf16}) {
             Tensor dl = h.upload(logits, {B, V}, dt);
             for (const float temp : {1.0f, 0.7f, 0.0f}) {
               const auto p = sampling_params(temp, 0, 1.0f, shapes::kEdgeRowsSeed);
               SCOPED_TRACE(testing::Message() << "V " << V << " " << dtype_name(dt) << " T " << temp);
               const Sampled want = cpu_sample(h, logits, B, V, nullptr, streams, counters, p);
               const Sampled got = gpu_sample(h, dl, Tensor{}, ds, dc, p);
               const int64_t bad = compare_tokens(h, got.tok, got.lp, want.tok, want.lp, V);
               std::vector<int32_t> got_exact, want_exact;
               for (int64_t b = 0; b < B; ++b) {
                 const int k = kind[size_t(b)];
                 if (temp == 0.0f || k == 1 || k == 2 || k == 5)
                   got_exact.push_back(got.tok[size_t(b)]), want_exact.push_back(want.tok[size_t(b)]);
               }
               h.same("exact_rows", got_exact, want_exact);
               if (temp != 0.0f) {
                 sampled_rows += B;
                 disagreements += bad;
               }
             }
           }
         }
         expect_disagreements(h, disagreements, sampled_rows);
       }});
}

// logit_rows: R rows over B logits rows (several sharing one), the tp
// cases' parameter sets without ties at the cuts.
void add_sample_logit_rows(Cases& cases, int64_t V, DType dt) {
  cases.push_back({case_name({"sample_tokens", dtn(dt), "logit_rows", "V" + std::to_string(V)}),
                   {"sample_tokens"},
                   "",
                   {{"tokens", 0, 0, "no ties near the cuts and no row near a CDF boundary here: every token agrees"},
                    kLogprobBound},
                   [=](Harness& h) {
                     const int64_t B = 12;
                     std::vector<float> x = bf16_exact(size_t(B * V), 3 + uint32_t(V), -6, 6);
                     std::vector<int32_t> rows;
                     std::vector<int64_t> streams, counters;
                     tp_sampling_rows(B, rows, streams, counters);
                     const int64_t R = int64_t(rows.size());
                     Tensor drows = h.upload_raw(rows, {R}), ds = h.upload_raw(streams, {R}),
                            dc = h.upload_raw(counters, {R});
                     Tensor dl = h.upload(x, {B, V}, dt);
                     int64_t bad = 0, sampled = 0;
                     for (const auto& c : tp_sampling_cases()) {
                       if (c.coarse) continue;
                       SCOPED_TRACE(c.name);
                       const Sampled want = cpu_sample(h, x, B, V, &rows, streams, counters, c.p);
                       const Sampled got = gpu_sample(h, dl, drows, ds, dc, c.p);
                       bad += compare_tokens(h, got.tok, got.lp, want.tok, want.lp, V);
                       sampled += R;
                     }
                     expect_disagreements(h, bad, sampled);
                   }});
}

// ---- the tp shard ops, composed on one backend ----

// Tensors of one backend: host vectors for the CPU, the harness arena for
// the GPU; read and written whole.
class Mem {
 public:
  Mem(Harness& h, bool gpu) : h_(h), gpu_(gpu) {}
  ops::Ctx ctx() const { return gpu_ ? h_.gpu() : h_.cpu(); }
  Tensor alloc(DType dt, std::initializer_list<int64_t> d) {
    if (gpu_) return h_.device_empty(dt, d);
    Tensor t(nullptr, dt, d);
    store_.emplace_back(std::max<size_t>(t.nbytes(), 16));
    t.data = store_.back().data();
    return t;
  }
  template <class T>
  std::vector<T> get(const Tensor& t) {
    if (gpu_) return h_.download_raw<T>(t);
    const T* p = static_cast<const T*>(t.data);
    return std::vector<T>(p, p + t.numel());
  }
  template <class T>
  void put(const Tensor& t, const std::vector<T>& v) {
    if (gpu_) return h_.put_raw(t, v);
    std::memcpy(t.data, v.data(), v.size() * sizeof(T));
  }
  // bf16-exact values in `dt` (the CPU: f32).
  Tensor logits(const std::vector<float>& x, int64_t B, int64_t V, DType dt) {
    if (gpu_) return h_.upload(x, {B, V}, dt);
    Tensor t = alloc(DType::f32, {B, V});
    put(t, x);
    return t;
  }

 private:
  Harness& h_;
  bool gpu_;
  std::deque<std::vector<unsigned char>> store_;
};

// The tp composition (tp_sampling_emulation.h) on mem's backend.
Sampled sample_tp(Mem& mem, int tp, const std::vector<float>& x, int64_t B, int64_t V, DType dt,
                  const std::vector<int32_t>& rows_h, const std::vector<int64_t>& streams_h,
                  const std::vector<int64_t>& counters_h, const ops::SamplingParams& p) {
  const int64_t R = int64_t(rows_h.size());
  Tensor rows = mem.alloc(DType::i32, {R}), streams = mem.alloc(DType::i64, {R}), counters = mem.alloc(DType::i64, {R});
  mem.put(rows, rows_h);
  mem.put(streams, streams_h);
  mem.put(counters, counters_h);
  TpSampled got = sample_tp_shards(mem, tp, x, B, V, dt, rows, streams, counters, p);
  return {std::move(got.tok), std::move(got.lp)};
}

// tp = 1, 2, 4 shards composed with the CPU shard ops and with the CUDA
// ones, every tp parameter set (coarse logits too: long runs of equal
// weights, ties at the cuts). The cut decisions are exact integer
// histograms of the weights' bits on both backends (sampling_select.h); the
// weights themselves are fp32 exp, which the backends round differently.
void add_sample_shards(Cases& cases, int64_t V, DType dt) {
  const std::string ops_list[] = {"sampling_shard_max",       "sampling_shard_sum",       "sampling_select_begin",
                                  "sampling_shard_histogram", "sampling_descend",         "sampling_shard_tie_count",
                                  "sampling_shard_tie_limit", "sampling_shard_kept_mass", "sampling_shard_choose"};
  cases.push_back(
      {case_name({"sampling_shard_ops", dtn(dt), "V" + std::to_string(V), "tp1_2_4"}),
       std::vector<std::string>(std::begin(ops_list), std::end(ops_list)),
       "",
       {{"tokens", 1, 1e-3,
         "the same radix descent over each backend's fp32 exp bits: a cut or a draw moves only where a mass or u "
         "falls within rounding of a boundary; at most 1 + 1/1000 of the rows"},
        kLogprobBound,
        {"greedy_tokens", 0, 0, "greedy: the first id of the max, exactly"}},
       [=](Harness& h) {
         const int64_t B = V > 10000 ? 8 : 24;
         std::vector<int32_t> rows;
         std::vector<int64_t> streams, counters;
         tp_sampling_rows(B, rows, streams, counters);
         const int64_t R = int64_t(rows.size());
         int64_t sampled = 0, differ = 0;
         for (const auto& c : tp_sampling_cases()) {
           std::vector<float> x = tp_sampling_logits(B, V, c.coarse, 40 + uint32_t(V));
           for (float& v : x) v = bf16_round(v);  // the same values in f32 and bf16
           for (const int tp : {1, 2, 4}) {
             SCOPED_TRACE(testing::Message() << c.name << " tp " << tp);
             const size_t mark = h.arena().mark();
             Mem cpu_mem(h, false), gpu_mem(h, true);
             const Sampled want = sample_tp(cpu_mem, tp, x, B, V, dt, rows, streams, counters, c.p);
             const Sampled got = sample_tp(gpu_mem, tp, x, B, V, dt, rows, streams, counters, c.p);
             const int64_t bad = compare_tokens(h, got.tok, got.lp, want.tok, want.lp, V);
             if (c.p.temperature == 0.0f) h.same("greedy_tokens", got.tok, want.tok);
             differ += bad;
             sampled += R;
             h.arena().reset(mark);
             if (::testing::Test::HasFatalFailure()) return;
           }
         }
         expect_disagreements(h, differ, sampled);
       }});
}

// ---- lm_head_sample ----

// hidden (B, C) and weight (V, C) bf16-exact, the logits spread by `scale`;
// rows (R) over the B hidden rows, or none (R = B); with `norm`, the rows
// under a folded norm (random sums of squares: rstd between ~0.5 and ~2).
// The fused op against the CPU op (the head into f32 logits, then
// sample_tokens).
void add_lm_head_sample(Cases& cases, int64_t B, int64_t V, int64_t C, float temperature, float scale,
                        std::vector<int32_t> rows, bool norm, bool every_token = false) {
  const Bound lp{"logprob", norm ? 1e-4 : 2e-5, 1e-6,
                 norm ? "under the norm the rows have unit RMS and the logits grow to ~20: fp32 sums of C products "
                        "in another order than the CPU's, 1e-4"
                      : "fp32 dot products over C in another order than the CPU's GEMM and the walk's recomputed "
                        "logits: 2e-5"};
  const Bound tokens = !every_token ? Bound{"tokens", 1, 0,
                                            "u within rounding of a CDF boundary (the GPU sums the logits in "
                                            "another order): never more than one row of a shape"}
                                    : Bound{"tokens", 0, 0, "no boundary rows at this shape: every token agrees"};
  cases.push_back(
      {case_name({"lm_head_sample", "bf16", dims({B, V, C}), rows.empty() ? "" : "rows", norm ? "norm" : ""}),
       {"lm_head_sample"},
       "",
       {tokens, lp},
       [=](Harness& h) {
         const int64_t R = rows.empty() ? B : int64_t(rows.size());
         std::vector<float> hid = bf16_exact(size_t(B * C), uint32_t(B + 7 * C), -scale, scale);
         std::vector<float> w = bf16_exact(size_t(V * C), uint32_t(V + C), -1.0f, 1.0f);
         std::vector<int64_t> streams, counters;
         make_keys(R, uint32_t(R * 3 + 1), streams, counters);
         ops::SamplingParams p;
         p.seed = 91;
         p.temperature = temperature;
         const int64_t parts = ops::norm_fold_parts(C);
         std::vector<float> ssq = bf16_exact(size_t(B * parts), uint32_t(B + 5), 0.25f, 4.0f);
         for (float& x : ssq) x *= 32.0f * scale * scale;  // a part of 32 columns of values ~scale
         std::vector<int32_t> rows_h = rows;
         const float eps = 1e-6f;
         Sampled want{std::vector<int32_t>(static_cast<size_t>(R)), std::vector<float>(static_cast<size_t>(R))};
         ops::lm_head_sample(h.cpu(), host_t(want.tok, {R}), host(want.lp, {R}), host(hid, {B, C}), host(w, {V, C}),
                             rows.empty() ? Tensor{} : host_t(rows_h, {R}), host_t(streams, {R}),
                             host_t(counters, {R}), p,
                             norm ? ops::RowNorm{host(ssq, {B, parts}), eps} : ops::RowNorm{});
         Tensor t = h.guarded(DType::i32, {R}), l = h.guarded(DType::f32, {R});
         ops::lm_head_sample(h.gpu(), t, l, h.upload(hid, {B, C}, DType::bf16), h.upload(w, {V, C}, DType::bf16),
                             rows.empty() ? Tensor{} : h.upload_raw(rows, {R}), h.upload_raw(streams, {R}),
                             h.upload_raw(counters, {R}), p,
                             norm ? ops::RowNorm{h.upload(ssq, {B, parts}), eps} : ops::RowNorm{});
         const int64_t bad = compare_tokens(h, h.download_raw<int32_t>(t), h.download(l), want.tok, want.lp, V);
         const Bound& b = h.bound("tokens");
         EXPECT_LE(double(bad), b.atol) << bad << " of " << R << " rows differ from the CPU (" << b.why << ")";
       }});
}

// ---- the device Philox draw ----

void add_philox(Cases& cases) {
  cases.push_back({"philox_draws_i32_B1000",
                   {},
                   "cuda::philox_draws",
                   {{"draws", 0, 0, "counter-based integer arithmetic: the host's bits"}},
                   [](Harness& h) {
                     const int64_t B = 1000;
                     std::vector<int64_t> streams, counters;
                     make_keys(B, 5, streams, counters);
                     counters[0] = -1;  // every bit set in the counter
                     streams[1] = std::numeric_limits<int64_t>::min();
                     Tensor out = h.guarded(DType::i32, {B, 4});
                     const uint64_t seed = 0x0123456789ABCDEFull;
                     ops::cuda::philox_draws(h.gpu(), out, h.upload_raw(streams, {B}), h.upload_raw(counters, {B}), seed);
                     std::vector<int32_t> want(size_t(B * 4));
                     for (int64_t b = 0; b < B; ++b) {
                       const U32x4 d = philox_draw(seed, uint64_t(streams[size_t(b)]), uint64_t(counters[size_t(b)]));
                       for (int j = 0; j < 4; ++j) want[size_t(b * 4 + j)] = int32_t(d.v[j]);
                     }
                     h.same("draws", h.download_raw<int32_t>(out), want);
                   }});
}

}  // namespace

void add_sampling_cases(Cases& cases) {
  for (const LpCase& c : shapes::logprob_cases()) add_logprob(cases, c);
  for (const shapes::LpSplit& s : shapes::logprob_splits()) add_logprob_two_shards(cases, s.N, s.V, s.V0, s.range, s.inv_t);
  add_sample_many_rows(cases);
  add_sample_untruncated_edges(cases);
  for (const int64_t V : {int64_t(1000), int64_t(151936)})
    for (const DType dt : {DType::f32, DType::bf16}) add_sample_logit_rows(cases, V, dt);
  for (const int64_t V : {int64_t(1000), int64_t(151936)})
    for (const DType dt : {DType::f32, DType::bf16}) add_sample_shards(cases, V, dt);
  for (const shapes::HeadShape& s : shapes::lm_head_shapes())
    add_lm_head_sample(cases, s.B, s.V, s.C, s.T, s.scale, {}, false);
  // Under a folded norm (the decode step's model.norm), with logit_rows.
  add_lm_head_sample(cases, 128, 151936, 896, 1.0f, 0.08f, {}, true);
  add_lm_head_sample(cases, 40, 3001, 128, 0.8f, 0.3f, {}, true);
  add_lm_head_sample(cases, 24, 2048, 64, 1.0f, 0.4f, {3, 3, 0, 23, 7}, true);
  // n samples of each prompt's row (the prefill's last rows), rows shared.
  {
    std::vector<int32_t> rows;
    for (int64_t r = 0; r < 4 * 24; ++r) rows.push_back(int32_t(r / 4));
    add_lm_head_sample(cases, 24, 2048, 128, 1.0f, 0.4f, rows, false, true);
  }
  add_philox(cases);
}

}  // namespace dapo::test::backend_ops
