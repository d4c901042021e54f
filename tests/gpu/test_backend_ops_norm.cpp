// Harness cases of the norms: rmsnorm, residual_rmsnorm (f32 and bf16), the
// folded norm's producer (linear_residual_fold) and its fallback
// (row_norm_apply).
#include <algorithm>

#include "dapo/ops/matmul.h"
#include "dapo/ops/norm_fold.h"
#include "dapo/ops/rmsnorm.h"
#include "gpu/backend_ops.h"
#include "gpu/op_shapes.h"

namespace dapo::test::backend_ops {
namespace {

constexpr float kEps = 1e-6f;

using shapes::NC;

// Bounds shared by rmsnorm and residual_rmsnorm (tuned on H100/H200 runs).
Bound out_bound(const char* name, DType dt) {
  return dt == DType::f32
             ? Bound{name, 2e-5, 2e-5, "fp32 statistics summed in another order than the CPU's double: a few ulps"}
             : Bound{name, 8e-3, 8e-3,
                     "one bf16 rounding of the output (2^-8 relative) with bf16 inputs of |x| < 3 and w < 1.5; "
                     "twice the rounding for rstd's fp32 error"};
}
Bound rstd_bound() {
  return {"rstd", 0, 2e-5, "mean(x^2) in fp32 (the CPU: double), ~sqrt(C) * 2^-24 relative, halved by the sqrt"};
}
Bound din_bound(const char* name, DType dt) {
  return dt == DType::f32 ? Bound{name, 2e-5, 2e-5, "fp32 dot products over C in another order than the CPU's"}
                          : Bound{name, 8e-4, 8e-3, "one bf16 rounding (2^-8 relative); atol for cancellation "
                                                    "in w*dout - x*rstd^2*mean(w*dout*x)"};
}
Bound dweight_bound(int64_t N) {
  return {"dweight", 1e-5 + 2e-6 * double(N), 1e-5,
          "N fp32 terms of size ~1 summed in fp32 partials (the CPU: double): 2e-6 per row"};
}

std::string dtn(DType dt) { return dtype_name(dt); }

void add_rmsnorm(Cases& cases, NC s, DType dt) {
  const int64_t N = s.N, C = s.C;
  cases.push_back({case_name({"rmsnorm_forward", dtn(dt), dims({N, C})}),
                   {"rmsnorm_forward"},
                   "",
                   {out_bound("out", dt), rstd_bound()},
                   [=](Harness& h) {
                     auto x = bf16_exact(size_t(N * C), 1, -3, 3), w = bf16_exact(size_t(C), 2, 0.5f, 1.5f);
                     std::vector<float> out(size_t(N * C)), rstd(static_cast<size_t>(N));
                     ops::rmsnorm_forward(h.cpu(), host(out, {N, C}), host(rstd, {N}), host(x, {N, C}),
                                          host(w, {C}), kEps);
                     Tensor gout = h.guarded(dt, {N, C}), grstd = h.guarded(DType::f32, {N});
                     ops::rmsnorm_forward(h.gpu(), gout, grstd, h.upload(x, {N, C}, dt), h.upload(w, {C}, dt), kEps);
                     const auto out_g = h.download(gout);
                     h.finite("out", out_g);
                     h.close("out", out_g, out);
                     h.close("rstd", h.download(grstd), rstd);
                   }});
  cases.push_back(
      {case_name({"rmsnorm_backward", dtn(dt), dims({N, C})}),
       {"rmsnorm_backward"},
       "",
       {din_bound("din", dt), dweight_bound(N)},
       [=](Harness& h) {
         auto x = bf16_exact(size_t(N * C), 1, -3, 3), w = bf16_exact(size_t(C), 2, 0.5f, 1.5f);
         auto dout = bf16_exact(size_t(N * C), 3);
         const auto dw0 = bf16_exact(size_t(C), 4);  // ACCUMULATED: starts non-zero
         std::vector<float> out(size_t(N * C)), rstd(static_cast<size_t>(N)), din(size_t(N * C)), dw = dw0;
         ops::rmsnorm_forward(h.cpu(), host(out, {N, C}), host(rstd, {N}), host(x, {N, C}), host(w, {C}), kEps);
         ops::rmsnorm_backward(h.cpu(), host(din, {N, C}), host(dw, {C}), host(dout, {N, C}), host(x, {N, C}),
                               host(w, {C}), host(rstd, {N}));
         // The GPU backward from the CPU's rstd, so that only the backward differs.
         Tensor gdin = h.guarded(dt, {N, C}), gdw = h.guarded_from(dw0, {C});
         ops::rmsnorm_backward(h.gpu(), gdin, gdw, h.upload(dout, {N, C}, dt), h.upload(x, {N, C}, dt),
                               h.upload(w, {C}, dt), h.upload(rstd, {N}));
         const auto din_g = h.download(gdin);
         h.finite("din", din_g);
         h.close("din", din_g, din);
         h.close("dweight", h.download(gdw), dw);
       }});
}

void add_residual_rmsnorm(Cases& cases, NC s, DType dt) {
  const int64_t N = s.N, C = s.C;
  const Bound sum_bound = dt == DType::f32 ? Bound{"sum", 0, 0, "a + b in fp32 on both backends: exact"}
                                           : Bound{"sum", 0, 4e-3, "a + b in fp32, rounded once to bf16: 2^-8"};
  cases.push_back(
      {case_name({"residual_rmsnorm_forward", dtn(dt), dims({N, C})}),
       {"residual_rmsnorm_forward"},
       "",
       {sum_bound, out_bound("out", dt), rstd_bound()},
       [=](Harness& h) {
         auto a = bf16_exact(size_t(N * C), 5, -3, 3), b = bf16_exact(size_t(N * C), 6, -1, 1);
         auto w = bf16_exact(size_t(C), 7, 0.5f, 1.5f);
         std::vector<float> sum(size_t(N * C)), out(size_t(N * C)), rstd(static_cast<size_t>(N));
         ops::residual_rmsnorm_forward(h.cpu(), host(sum, {N, C}), host(out, {N, C}), host(rstd, {N}),
                                       host(a, {N, C}), host(b, {N, C}), host(w, {C}), kEps);
         Tensor gsum = h.guarded(dt, {N, C}), gout = h.guarded(dt, {N, C}), grstd = h.guarded(DType::f32, {N});
         ops::residual_rmsnorm_forward(h.gpu(), gsum, gout, grstd, h.upload(a, {N, C}, dt), h.upload(b, {N, C}, dt),
                                       h.upload(w, {C}, dt), kEps);
         auto sum_g = h.download(gsum);
         const auto out_g = h.download(gout);
         h.finite("sum", sum_g);
         h.finite("out", out_g);
         h.close("sum", sum_g, sum);
         // The norm is that of the stored (bf16: rounded) sum: the CPU's
         // rmsnorm of the GPU's sum, so that the sum's rounding is not
         // counted twice.
         ops::rmsnorm_forward(h.cpu(), host(out, {N, C}), host(rstd, {N}), host(sum_g, {N, C}), host(w, {C}), kEps);
         h.close("out", out_g, out);
         h.close("rstd", h.download(grstd), rstd);
       }});
  cases.push_back(
      {case_name({"residual_rmsnorm_backward", dtn(dt), dims({N, C})}),
       {"residual_rmsnorm_backward"},
       "",
       {din_bound("dsum", dt), dweight_bound(N)},
       [=](Harness& h) {
         auto a = bf16_exact(size_t(N * C), 5, -3, 3), b = bf16_exact(size_t(N * C), 6, -1, 1);
         auto w = bf16_exact(size_t(C), 7, 0.5f, 1.5f), dout = bf16_exact(size_t(N * C), 8);
         const auto dsum0 = bf16_exact(size_t(N * C), 9), dw0 = bf16_exact(size_t(C), 10);  // ACCUMULATED
         // The forward's stored sum (bf16: rounded) is the backward's input on both sides.
         std::vector<float> sum(size_t(N * C));
         for (size_t i = 0; i < sum.size(); ++i) sum[i] = dt == DType::bf16 ? bf16_round(a[i] + b[i]) : a[i] + b[i];
         std::vector<float> out(size_t(N * C)), rstd(static_cast<size_t>(N)), dsum = dsum0, dw = dw0;
         ops::rmsnorm_forward(h.cpu(), host(out, {N, C}), host(rstd, {N}), host(sum, {N, C}), host(w, {C}), kEps);
         ops::residual_rmsnorm_backward(h.cpu(), host(dsum, {N, C}), host(dw, {C}), host(dout, {N, C}),
                                        host(sum, {N, C}), host(w, {C}), host(rstd, {N}));
         Tensor gdsum = h.guarded_from(dsum0, {N, C}, dt), gdw = h.guarded_from(dw0, {C});
         ops::residual_rmsnorm_backward(h.gpu(), gdsum, gdw, h.upload(dout, {N, C}, dt), h.upload(sum, {N, C}, dt),
                                        h.upload(w, {C}, dt), h.upload(rstd, {N}));
         // bf16: the CPU's dsum0 + din is in fp32, the GPU's rounded once.
         h.close("dsum", h.download(gdsum), dsum);
         h.close("dweight", h.download(gdw), dw);
       }});
}

// row_norm_apply: each row scaled by the rstd of its parts' sums of squares
// (random parts as a fold would write them: rstd between ~0.5 and ~2).
void add_row_norm_apply(Cases& cases, int64_t M, int64_t C, DType dt) {
  const Bound b = dt == DType::f32
                      ? Bound{"x", 0, 1e-6,
                              "rstd from the same fp32 sum of parts (the GPU: fma(total, 1/C, eps), the CPU: "
                              "total / C + eps) and one fp32 product: a few ulps (2^-23 each)"}
                      : Bound{"x", 0, 4e-3, "one bf16 rounding of x * rstd (2^-8) over the f32 ulps"};
  cases.push_back({case_name({"row_norm_apply", dtn(dt), dims({M, C})}),
                   {"row_norm_apply"},
                   "",
                   {b},
                   [=](Harness& h) {
                     const int64_t P = ops::norm_fold_parts(C);
                     auto x = bf16_exact(size_t(M * C), uint32_t(M + C), -2, 2);
                     auto ssq = bf16_exact(size_t(M * P), uint32_t(M + 3), 0.25f, 4.0f);
                     for (float& q : ssq) q *= float(ops::kNormFoldPart);  // mean squares 0.25..4: rstd 0.5..2
                     std::vector<float> want = x;
                     ops::row_norm_apply(h.cpu(), host(want, {M, C}), ops::RowNorm{host(ssq, {M, P}), kEps});
                     Tensor gx = h.guarded_from(x, {M, C}, dt);
                     ops::row_norm_apply(h.gpu(), gx, ops::RowNorm{h.upload(ssq, {M, P}), kEps});
                     h.close("x", h.download(gx), want);
                   }});
}

// linear_residual_fold against the CPU arithmetic of its CUDA contract on
// the same bf16 inputs: sum = bf16(res + bf16(in @ w^T)), y = bf16(sum * g)
// from the GPU's own sum, ssq the parts' fp32 sums of squares of the stored
// sums. Qwen2.5 o_proj (896 x 896), down_proj (4864 -> 896, 8960 -> 1536)
// on the skinny epilogue, and 70 columns (the product, then one pass);
// odd M writes sum in place of res.
void add_linear_residual_fold(Cases& cases, int64_t K, int64_t C, int64_t M) {
  const bool in_place = M % 2 == 1;
  cases.push_back(
      {case_name({"linear_residual_fold", "bf16", dims({M, K, C}), in_place ? "in_place" : ""}),
       {"linear_residual_fold"},
       "",
       {{"sum", 2e-2, 1e-2,
         "the product rounded to bf16 and added to res (|res| < 2) in another summation order than the CPU's "
         "fp32 GEMM: up to a bf16 ulp of the sum (2^-7 relative) where the roundings fall apart"},
        {"y", 0, 0, "bf16(sum * g) of the GPU's own sum: one correctly rounded product, exact"},
        {"ssq", 1e-4, 1e-5, "32 fp32 squares of the stored sums summed in another order than the CPU's double"}},
       [=](Harness& h) {
         const uint32_t seed = uint32_t(M * 7 + K);
         auto in = bf16_exact(size_t(M * K), seed, -1, 1);
         const float wr = 1.0f / std::sqrt(float(K));
         auto w = bf16_exact(size_t(C * K), seed + 1, -wr, wr);
         auto res = bf16_exact(size_t(M * C), seed + 2, -2, 2);
         auto g = bf16_exact(size_t(C), seed + 3, 0.5f, 1.5f);
         const int64_t P = ops::norm_fold_parts(C);
         const Tensor tin = h.upload(in, {M, K}, DType::bf16), tw = h.upload(w, {C, K}, DType::bf16);
         const Tensor tg = h.upload(g, {C}, DType::bf16);
         const Tensor tres = in_place ? h.guarded_from(res, {M, C}, DType::bf16) : h.upload(res, {M, C}, DType::bf16);
         const Tensor sum = in_place ? tres : h.guarded(DType::bf16, {M, C});
         const Tensor y = h.guarded(DType::bf16, {M, C}), ssq = h.guarded(DType::f32, {M, P});
         ops::linear_residual_fold(h.gpu(), sum, y, ssq, tin, tw, tres, tg);
         const auto sum_g = h.download(sum), y_g = h.download(y), ssq_g = h.download(ssq);
         std::vector<float> prod(size_t(M * C));
         ops::linear_forward(h.cpu(), host(prod, {M, C}), host(in, {M, K}), host(w, {C, K}), Tensor{});
         std::vector<float> want_sum(prod.size()), want_y(prod.size()), want_ssq(size_t(M * P));
         for (int64_t m = 0; m < M; ++m)
           for (int64_t c = 0; c < C; ++c) {
             const size_t i = size_t(m * C + c);
             want_sum[i] = bf16_round(res[i] + bf16_round(prod[i]));
             want_y[i] = bf16_round(sum_g[i] * g[size_t(c)]);
           }
         for (int64_t m = 0; m < M; ++m)
           for (int64_t p = 0; p < P; ++p) {
             double q = 0;
             for (int64_t c = p * 32; c < std::min<int64_t>(C, p * 32 + 32); ++c)
               q += double(sum_g[size_t(m * C + c)]) * sum_g[size_t(m * C + c)];
             want_ssq[size_t(m * P + p)] = float(q);
           }
         h.close("sum", sum_g, want_sum);
         h.close("y", y_g, want_y);
         h.close("ssq", ssq_g, want_ssq);
       }});
}

}  // namespace

void add_norm_cases(Cases& cases) {
  for (const DType dt : {DType::f32, DType::bf16})
    for (const NC s : shapes::norm_shapes()) {
      add_rmsnorm(cases, s, dt);
      add_residual_rmsnorm(cases, s, dt);
    }
  // The decode batches of 0.5B / 1.5B, one row, no row, a width off the parts.
  for (const DType dt : {DType::f32, DType::bf16})
    for (const NC s : {NC{128, 896}, NC{1, 1536}, NC{0, 896}, NC{37, 70}}) add_row_norm_apply(cases, s.N, s.C, dt);
  for (const NC kc : {NC{896, 896}, NC{4864, 896}, NC{8960, 1536}, NC{64, 70}})
    for (const int64_t M : {1, 5, 32, 33, 100, 128, 256}) add_linear_residual_fold(cases, kc.N, kc.C, M);
}

}  // namespace dapo::test::backend_ops
