// Harness cases of the products: matmul and the linear ops (cuBLASLt), the
// multi-segment products (the skinny kernel under every plan, cuBLASLt and
// its strided batch), gate/up + SwiGLU (fused, wide, routed), and the fused
// q/k/v + RoPE + cache write.
//
// Inputs are bf16-exact, so every product is exact in fp32 on both sides;
// what differs is the fp32 summation order (an error growing with K) and,
// for bf16 outputs, the final rounding (2^-8 relative): atol 1e-6 + 4e-7 K,
// rtol 4e-3 (bf16) or 1e-5 (f32). cuBLASLt's Hopper kernels may round
// alpha * AB to bf16 before adding beta * C or a bias (matmul.h): half an
// ulp of each addend more (2^-8 (|product| + |addend|)), as "extra".
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda/cuda_ops.h"
#include "cuda/gemm/gemv.h"
#include "dapo/ops/matmul.h"
#include "dapo/ops/qkv_rope_kv_write.h"
#include "dapo/ops/rope.h"
#include "gpu/backend_ops.h"
#include "gpu/op_shapes.h"

namespace dapo::test::backend_ops {
namespace {

namespace cd = ops::cuda::detail;
using ops::LinearSegment;

std::string dtn(DType dt) { return dtype_name(dt); }

Bound gemm_bound(const std::string& output, DType out, int64_t K) {
  return {output, 1e-6 + 4e-7 * double(K), out == DType::bf16 ? 4e-3 : 1e-5,
          std::string(out == DType::bf16 ? "bf16 output: one rounding (2^-8)" : "f32 output: no TF32") +
              "; fp32 sums over K = " + std::to_string(K) + " in another order than OpenBLAS (4e-7 per term)"};
}

// |x| + |y| elementwise, times 2^-8: a second bf16 rounding's allowance.
std::vector<float> twice(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<float> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) s[i] = float(0x1p-8 * (std::fabs(x[i]) + std::fabs(y[i])));
  return s;
}

Tensor view_at(const Tensor& base, int64_t elems, std::initializer_list<int64_t> d) {
  return Tensor(static_cast<char*>(base.data) + elems * int64_t(dtype_size(base.dtype)), base.dtype, d, Device::cuda);
}

// ---- matmul ----

struct Dtypes {
  DType ab, cd;  // operands, output
};
std::string dtypes_name(Dtypes d) { return dtn(d.ab) + "_to_" + dtn(d.cd); }
constexpr Dtypes kDtypes[] = {{DType::bf16, DType::bf16}, {DType::bf16, DType::f32}, {DType::f32, DType::f32}};

struct MNK {
  int64_t M, N, K;
};

// Every transpose pair and (alpha, beta) of (1, 0) over the NaN fill, (1, 1)
// and (0.75, -0.5), at odd sizes and a long K.
void add_matmul(Cases& cases, Dtypes dt, MNK s, uint32_t seed0) {
  cases.push_back(
      {case_name({"matmul", dtypes_name(dt), dims({s.M, s.N, s.K})}),
       {"matmul"},
       "",
       {gemm_bound("c", dt.cd, s.K)},
       [=](Harness& h) {
         const int64_t M = s.M, N = s.N, K = s.K;
         uint32_t seed = seed0;
         struct Scales {
           float alpha, beta;
         };
         for (int ta = 0; ta < 2; ++ta)
           for (int tb = 0; tb < 2; ++tb)
             for (const Scales sc : {Scales{1.0f, 0.0f}, Scales{1.0f, 1.0f}, Scales{0.75f, -0.5f}}) {
               SCOPED_TRACE(testing::Message() << "ta " << ta << " tb " << tb << " alpha " << sc.alpha << " beta "
                                               << sc.beta);
               auto a = bf16_exact(size_t(M * K), ++seed), b = bf16_exact(size_t(K * N), ++seed);
               auto c = bf16_exact(size_t(M * N), ++seed);
               Tensor ga = ta ? h.upload(a, {K, M}, dt.ab) : h.upload(a, {M, K}, dt.ab);
               Tensor gb = tb ? h.upload(b, {N, K}, dt.ab) : h.upload(b, {K, N}, dt.ab);
               Tensor gc = h.guarded(dt.cd, {M, N});  // NaN: must vanish when beta == 0
               if (sc.beta != 0.0f) h.put(gc, c);
               ops::matmul(h.gpu(), gc, ga, gb, ta, tb, sc.alpha, sc.beta);
               std::vector<float> prod(size_t(M * N)), beta_c(size_t(M * N));
               for (size_t i = 0; i < c.size(); ++i) beta_c[i] = sc.beta * c[i];
               Tensor ha = ta ? host(a, {K, M}) : host(a, {M, K}), hb = tb ? host(b, {N, K}) : host(b, {K, N});
               ops::matmul(h.cpu(), host(prod, {M, N}), ha, hb, ta, tb, sc.alpha, 0.0f);
               ops::matmul(h.cpu(), host(c, {M, N}), ha, hb, ta, tb, sc.alpha, sc.beta);
               if (dt.cd == DType::bf16 && sc.beta != 0.0f) h.close("c", h.download(gc), c, twice(prod, beta_c));
               else h.close("c", h.download(gc), c);
               if (::testing::Test::HasFailure()) return;
             }
       }});
}

// K == 0: C = beta * C (exactly 0 over the NaN fill for beta == 0); M == 0
// or N == 0: nothing written (the guards).
void add_matmul_zero(Cases& cases, Dtypes dt) {
  cases.push_back({case_name({"matmul", dtypes_name(dt), "zero_sizes"}),
                   {"matmul"},
                   "",
                   {{"c", 0, 0, "K = 0: beta * C, an exact scaling by 0 or 2"}},
                   [=](Harness& h) {
                     const int64_t M = 5, N = 9;
                     std::vector<float> none(1);
                     for (float beta : {0.0f, 2.0f}) {
                       auto c = bf16_exact(size_t(M * N), 7);
                       Tensor gc = h.guarded(dt.cd, {M, N});
                       if (beta != 0.0f) h.put(gc, c);
                       ops::matmul(h.gpu(), gc, h.device_empty(dt.ab, {M, 0}), h.device_empty(dt.ab, {0, N}), false,
                                   false, 1.0f, beta);
                       ops::matmul(h.cpu(), host(c, {M, N}), host(none, {M, 0}), host(none, {0, N}), false, false,
                                   1.0f, beta);
                       h.close("c", h.download(gc), c);
                     }
                     Tensor c0 = h.guarded(dt.cd, {0, N}), c1 = h.guarded(dt.cd, {M, 0});
                     ops::matmul(h.gpu(), c0, h.device_empty(dt.ab, {0, 4}), h.device_empty(dt.ab, {4, N}), false,
                                 false, 1.0f, 0.0f);
                     ops::matmul(h.gpu(), c1, h.device_empty(dt.ab, {4, M}), h.device_empty(dt.ab, {0, 4}), true,
                                 true, 1.0f, 1.0f);
                     h.close("c", h.download(c0), {});
                     h.close("c", h.download(c1), {});
                   }});
}

// Views 2, 4 or 6 bytes past an aligned address (row slices of odd-width
// tensors): the plan must come from kernels that accept them.
void add_matmul_misaligned(Cases& cases, Dtypes dt) {
  const int64_t M = 45, N = 77, K = 150;
  cases.push_back({case_name({"matmul", dtypes_name(dt), dims({M, N, K}), "misaligned"}),
                   {"matmul"},
                   "",
                   {gemm_bound("c", dt.cd, K)},
                   [=](Harness& h) {
                     auto a = bf16_exact(size_t(M * K), 31), b = bf16_exact(size_t(K * N), 32);
                     auto c = bf16_exact(size_t(M * N), 33);
                     const Tensor abuf = h.device_empty(dt.ab, {M * K + 8}), bbuf = h.device_empty(dt.ab, {K * N + 8});
                     const Tensor cbuf = h.guarded(dt.cd, {M * N + 8});
                     for (int64_t off : {1, 2, 3}) {
                       SCOPED_TRACE(testing::Message() << "offset " << off << " elements");
                       Tensor ga = view_at(abuf, off, {M, K}), gb = view_at(bbuf, 4 - off, {N, K});
                       Tensor gc = view_at(cbuf, off, {M, N});
                       h.put(ga, a);
                       h.put(gb, b);
                       h.put(gc, c);
                       std::vector<float> want = c, prod(size_t(M * N));
                       ops::matmul(h.gpu(), gc, ga, gb, false, true, 1.0f, 1.0f);
                       ops::matmul(h.cpu(), host(want, {M, N}), host(a, {M, K}), host(b, {N, K}), false, true, 1.0f,
                                   1.0f);
                       ops::matmul(h.cpu(), host(prod, {M, N}), host(a, {M, K}), host(b, {N, K}), false, true, 1.0f,
                                   0.0f);
                       if (dt.cd == DType::bf16) h.close("c", h.download(gc), want, twice(prod, c));
                       else h.close("c", h.download(gc), want);
                     }
                   }});
}

// ---- linear ----

struct NIO {
  int64_t N, I, O;
};

// No bias, a bias of out's dtype (the epilogue), of the other dtype (broadcast first).
void add_linear_forward(Cases& cases, Dtypes dt, NIO s, uint32_t seed0) {
  cases.push_back(
      {case_name({"linear_forward", dtypes_name(dt), dims({s.N, s.I, s.O})}),
       {"linear_forward"},
       "",
       {gemm_bound("out", dt.cd, s.I)},
       [=](Harness& h) {
         const int64_t N = s.N, I = s.I, O = s.O;
         uint32_t seed = seed0;
         for (int bias_mode = 0; bias_mode < 3; ++bias_mode) {
           SCOPED_TRACE(testing::Message() << "bias " << bias_mode);
           auto in = bf16_exact(size_t(N * I), ++seed), w = bf16_exact(size_t(O * I), ++seed);
           auto bias = bf16_exact(size_t(O), ++seed);
           const DType bias_dt = bias_mode == 1 ? dt.cd : (dt.cd == DType::f32 ? DType::bf16 : DType::f32);
           Tensor gout = h.guarded(dt.cd, {N, O});
           ops::linear_forward(h.gpu(), gout, h.upload(in, {N, I}, dt.ab), h.upload(w, {O, I}, dt.ab),
                               bias_mode == 0 ? Tensor{} : h.upload(bias, {O}, bias_dt));
           std::vector<float> want(size_t(N * O)), prod(size_t(N * O)), bias_rows(size_t(N * O));
           ops::linear_forward(h.cpu(), host(want, {N, O}), host(in, {N, I}), host(w, {O, I}),
                               bias_mode == 0 ? Tensor{} : host(bias, {O}));
           ops::linear_forward(h.cpu(), host(prod, {N, O}), host(in, {N, I}), host(w, {O, I}), Tensor{});
           for (size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = bias[i % size_t(std::max<int64_t>(O, 1))];
           if (dt.cd == DType::bf16 && bias_mode != 0) h.close("out", h.download(gout), want, twice(prod, bias_rows));
           else h.close("out", h.download(gout), want);
           if (::testing::Test::HasFailure()) return;
         }
       }});
}

// Into a separate out and in place (res == out), prefill-sized and small.
void add_linear_residual(Cases& cases, Dtypes dt, NIO s, uint32_t seed0) {
  cases.push_back(
      {case_name({"linear_residual_forward", dtypes_name(dt), dims({s.N, s.I, s.O})}),
       {"linear_residual_forward"},
       "",
       {gemm_bound("out", dt.cd, s.I), {"res", 0, 0, "an input: left as it was"}},
       [=](Harness& h) {
         const int64_t N = s.N, I = s.I, O = s.O;
         uint32_t seed = seed0;
         for (const bool in_place : {false, true}) {
           SCOPED_TRACE(testing::Message() << "in place " << in_place);
           auto in = bf16_exact(size_t(N * I), ++seed), w = bf16_exact(size_t(O * I), ++seed);
           auto res = bf16_exact(size_t(N * O), ++seed);
           Tensor gout = h.guarded(dt.cd, {N, O});
           Tensor gres = in_place ? gout : h.upload(res, {N, O}, dt.cd);
           if (in_place) h.put(gout, res);
           ops::linear_residual_forward(h.gpu(), gout, h.upload(in, {N, I}, dt.ab), h.upload(w, {O, I}, dt.ab), gres);
           std::vector<float> want(size_t(N * O)), prod(size_t(N * O));
           ops::linear_residual_forward(h.cpu(), host(want, {N, O}), host(in, {N, I}), host(w, {O, I}),
                                        host(res, {N, O}));
           ops::linear_forward(h.cpu(), host(prod, {N, O}), host(in, {N, I}), host(w, {O, I}), Tensor{});
           if (dt.cd == DType::bf16) h.close("out", h.download(gout), want, twice(prod, res));
           else h.close("out", h.download(gout), want);
           if (!in_place) h.same("res", h.download(gres), res);
           if (::testing::Test::HasFailure()) return;
         }
       }});
}

// din OVERWRITTEN (or skipped), dweight and dbias ACCUMULATED onto non-zero
// values; zero sizes.
void add_linear_backward(Cases& cases, Dtypes dt, NIO s, uint32_t seed0) {
  cases.push_back(
      {case_name({"linear_backward", dtypes_name(dt), dims({s.N, s.I, s.O})}),
       {"linear_backward"},
       "",
       {gemm_bound("din", dt.cd, s.O), gemm_bound("dweight", DType::f32, s.N), gemm_bound("dbias", DType::f32, s.N)},
       [=](Harness& h) {
         const int64_t N = s.N, I = s.I, O = s.O;
         uint32_t seed = seed0;
         for (bool with_din : {true, false})
           for (bool with_bias : {true, false}) {
             SCOPED_TRACE(testing::Message() << "din " << with_din << " bias " << with_bias);
             auto in = bf16_exact(size_t(N * I), ++seed), w = bf16_exact(size_t(O * I), ++seed);
             auto dout = bf16_exact(size_t(N * O), ++seed);
             auto dw = bf16_exact(size_t(O * I), ++seed, -4, 4), db = bf16_exact(size_t(O), ++seed, -4, 4);
             std::vector<float> din(size_t(N * I));
             Tensor gdin = with_din ? h.guarded(dt.cd, {N, I}) : Tensor{};
             Tensor gdw = h.guarded_from(dw, {O, I}), gdb = with_bias ? h.guarded_from(db, {O}) : Tensor{};
             ops::linear_backward(h.gpu(), gdin, gdw, gdb, h.upload(dout, {N, O}, dt.ab), h.upload(in, {N, I}, dt.ab),
                                  h.upload(w, {O, I}, dt.ab));
             ops::linear_backward(h.cpu(), with_din ? host(din, {N, I}) : Tensor{}, host(dw, {O, I}),
                                  with_bias ? host(db, {O}) : Tensor{}, host(dout, {N, O}), host(in, {N, I}),
                                  host(w, {O, I}));
             if (with_din) h.close("din", h.download(gdin), din);
             h.close("dweight", h.download(gdw), dw);
             if (with_bias) h.close("dbias", h.download(gdb), db);
             if (::testing::Test::HasFailure()) return;
           }
       }});
}

// The shape where split-K is likeliest (K = tokens >> M, N): q/k/v's weight
// and bias gradients of a 16k-token micro-batch; and the forward there.
void add_linear_large(Cases& cases, Dtypes dt) {
  const int64_t N = 16384, I = 1536, O = 256;
  auto inputs = [=](std::vector<float>& in, std::vector<float>& w, std::vector<float>& dout, std::vector<float>& bias,
                    std::vector<float>& dw, std::vector<float>& db) {
    in = bf16_exact(size_t(N * I), 401), w = bf16_exact(size_t(O * I), 402, -0.1f, 0.1f);
    dout = bf16_exact(size_t(N * O), 403), bias = bf16_exact(size_t(O), 404);
    dw = bf16_exact(size_t(O * I), 405), db = bf16_exact(size_t(O), 406);
  };
  cases.push_back({case_name({"linear_backward", dtypes_name(dt), dims({N, I, O})}),
                   {"linear_backward"},
                   "",
                   {gemm_bound("din", dt.cd, O), gemm_bound("dweight", DType::f32, N), gemm_bound("dbias", DType::f32, N)},
                   [=](Harness& h) {
                     std::vector<float> in, w, dout, bias, dw, db, din(size_t(N * I));
                     inputs(in, w, dout, bias, dw, db);
                     Tensor gdin = h.guarded(dt.cd, {N, I}), gdw = h.guarded_from(dw, {O, I}), gdb = h.guarded_from(db, {O});
                     ops::linear_backward(h.gpu(), gdin, gdw, gdb, h.upload(dout, {N, O}, dt.ab),
                                          h.upload(in, {N, I}, dt.ab), h.upload(w, {O, I}, dt.ab));
                     ops::linear_backward(h.cpu(), host(din, {N, I}), host(dw, {O, I}), host(db, {O}),
                                          host(dout, {N, O}), host(in, {N, I}), host(w, {O, I}));
                     h.close("din", h.download(gdin), din);
                     h.close("dweight", h.download(gdw), dw);
                     h.close("dbias", h.download(gdb), db);
                   }});
  cases.push_back({case_name({"linear_forward", dtypes_name(dt), dims({N, I, O}), "bias"}),
                   {"linear_forward"},
                   "",
                   {gemm_bound("out", dt.cd, I)},
                   [=](Harness& h) {
                     std::vector<float> in, w, dout, bias, dw, db, out(size_t(N * O)), prod(size_t(N * O)),
                         bias_rows(size_t(N * O));
                     inputs(in, w, dout, bias, dw, db);
                     Tensor gout = h.guarded(dt.cd, {N, O});
                     ops::linear_forward(h.gpu(), gout, h.upload(in, {N, I}, dt.ab), h.upload(w, {O, I}, dt.ab),
                                         h.upload(bias, {O}, dt.cd));
                     ops::linear_forward(h.cpu(), host(out, {N, O}), host(in, {N, I}), host(w, {O, I}), host(bias, {O}));
                     ops::linear_forward(h.cpu(), host(prod, {N, O}), host(in, {N, I}), host(w, {O, I}), Tensor{});
                     for (size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = bias[i % size_t(O)];
                     if (dt.cd == DType::bf16) h.close("out", h.download(gout), out, twice(prod, bias_rows));
                     else h.close("out", h.download(gout), out);
                   }});
}

// ---- linear_forward_multi ----

// One call's host inputs and CPU reference, and its device tensors. bias_mode:
// 0 none, 1 bf16, 2 f32 (the CPU sees the same values).
struct Multi {
  int64_t M = 0, K = 0;
  std::vector<int64_t> N;
  std::vector<float> in;
  std::vector<std::vector<float>> w, b, want;
  Tensor gin;
  std::vector<Tensor> gw, gb;
  std::vector<DType> out_dt;

  static Multi make(Harness& h, int64_t M, int64_t K, const std::vector<int64_t>& N, DType out_dt, int bias_mode,
                    uint32_t seed) {
    Multi c;
    c.M = M, c.K = K, c.N = N;
    c.in = bf16_exact(size_t(M * K), seed);
    c.gin = h.upload(c.in, {M, K}, DType::bf16);
    for (size_t i = 0; i < N.size(); ++i) {
      c.w.push_back(bf16_exact(size_t(N[i] * K), seed + 10 + uint32_t(i)));
      c.b.push_back(bias_mode == 0 ? std::vector<float>{} : bf16_exact(size_t(N[i]), seed + 20 + uint32_t(i)));
      c.gw.push_back(h.upload(c.w[i], {N[i], K}, DType::bf16));
      c.gb.push_back(bias_mode == 0 ? Tensor{} : h.upload(c.b[i], {N[i]}, bias_mode == 1 ? DType::bf16 : DType::f32));
      c.out_dt.push_back(out_dt);
    }
    c.reference(h);
    return c;
  }
  void reference(Harness& h) {
    std::vector<LinearSegment> segs;
    want.assign(N.size(), {});
    for (size_t i = 0; i < N.size(); ++i) {
      want[i].assign(size_t(M * N[i]), 0.0f);
      segs.push_back({host(want[i], {M, N[i]}), host(w[i], {N[i], K}), b[i].empty() ? Tensor{} : host(b[i], {N[i]})});
    }
    ops::linear_forward_multi(h.cpu(), host(in, {M, K}), segs);
  }
  // Fresh guarded (NaN-filled) outputs over the case's weights.
  std::vector<LinearSegment> outputs(Harness& h) const {
    std::vector<LinearSegment> segs;
    for (size_t i = 0; i < N.size(); ++i) segs.push_back({h.guarded(out_dt[i], {M, N[i]}), gw[i], gb[i]});
    return segs;
  }
  // Each segment's output against the CPU under `output`'s bound;
  // may_round_twice: the call may have gone to cuBLASLt, whose Hopper
  // kernels can round the product to bf16 before adding the bias.
  void expect_matches(Harness& h, const std::vector<LinearSegment>& segs, const std::string& output,
                      bool may_round_twice) const {
    for (size_t i = 0; i < segs.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "segment " << i);
      std::vector<float> extra;
      if (may_round_twice && out_dt[i] == DType::bf16 && !b[i].empty()) {
        extra.resize(want[i].size());
        for (size_t j = 0; j < extra.size(); ++j) {
          const double bj = b[i][j % b[i].size()];
          extra[j] = float(0x1p-8 * (std::fabs(want[i][j] - bj) + std::fabs(bj)));
        }
      }
      h.close(output, h.download(segs[i].out), want[i], extra);
    }
  }
};

Bound multi_bound(const std::string& output, DType out, int64_t K, bool twice) {
  Bound b = gemm_bound(output, out, K);
  if (twice) b.why += "; cuBLASLt may round the product before adding the bias (2^-8 of each more)";
  return b;
}

using shapes::Layer;
using shapes::qwen_layers;
constexpr int64_t kRows[] = {0, 1, 3, 17, 64, 128, 200, 256};

std::string layer_name(const Layer& l) { return std::string(l.model).substr(7) + "_" + l.layer; }

// The skinny kernel with its own plan and the op as routed, on a Qwen
// projection at decode rows; out and bias dtypes rotate over the cases.
void add_multi_qwen(Cases& cases, const Layer& l, int64_t M, DType out_dt, int bias_mode, uint32_t seed) {
  cases.push_back(
      {case_name({"linear_forward_multi", dtn(out_dt), layer_name(l), "M" + std::to_string(M),
                  "bias" + std::to_string(bias_mode)}),
       {"linear_forward_multi"},
       "cuda::detail::linear_forward_multi_skinny",
       {multi_bound("skinny", out_dt, l.K, false), multi_bound("routed", out_dt, l.K, true)},
       [=](Harness& h) {
         const Multi c = Multi::make(h, M, l.K, l.N, out_dt, bias_mode, seed);
         auto skinny = c.outputs(h), routed = c.outputs(h);
         ASSERT_TRUE(cd::linear_multi_skinny_supported(c.gin, skinny));
         cd::linear_forward_multi_skinny(h.gpu(), c.gin, skinny);
         ops::linear_forward_multi(h.gpu(), c.gin, routed);
         c.expect_matches(h, skinny, "skinny", false);
         c.expect_matches(h, routed, "routed", true);
       }});
}

// The LM head: f32 logits over 151936 columns.
void add_multi_lm_head(Cases& cases, int64_t M) {
  cases.push_back({case_name({"linear_forward_multi", "f32", "lm_head_0.5b", "M" + std::to_string(M)}),
                   {"linear_forward_multi"},
                   "cuda::detail::linear_forward_multi_skinny",
                   {multi_bound("skinny", DType::f32, 896, false), multi_bound("routed", DType::f32, 896, true)},
                   [=](Harness& h) {
                     const Multi c = Multi::make(h, M, 896, {151936}, DType::f32, 0, 77 + uint32_t(M));
                     auto skinny = c.outputs(h), routed = c.outputs(h);
                     cd::linear_forward_multi_skinny(h.gpu(), c.gin, skinny);
                     ops::linear_forward_multi(h.gpu(), c.gin, routed);
                     c.expect_matches(h, skinny, "skinny", false);
                     c.expect_matches(h, routed, "routed", true);
                   }});
}

// Every tile configuration, unsplit and split (3 and 8 ways), with and
// without L2 lookahead, on tails in every dimension: M not a multiple of any
// tile, N below and above a tile, K not a multiple of 64.
void add_multi_every_plan(Cases& cases, int64_t K, std::vector<int64_t> N, int64_t M, uint32_t seed) {
  const DType out_dt = M == 17 ? DType::f32 : DType::bf16;
  cases.push_back(
      {case_name({"linear_forward_multi_skinny", "every_plan", dtn(out_dt), "K" + std::to_string(K),
                  "N" + std::to_string(N[0]) + "_" + std::to_string(N.size()) + "seg", "M" + std::to_string(M)}),
       {},
       "cuda::detail::linear_forward_multi_skinny (forced plans)",
       {multi_bound("skinny", out_dt, K, false)},
       [=](Harness& h) {
         const Multi c = Multi::make(h, M, K, N, out_dt, int(M % 3), seed);
         for (int config = 0; config < cd::skinny_config_count(); ++config)
           for (const int splits : {1, 3, 8}) {
             SCOPED_TRACE(testing::Message() << "config " << config << " splits " << splits);
             const cd::SkinnyPlan plan{config, splits, splits == 3, splits != 8, 2 * ((config + splits) % 3)};
             auto segs = c.outputs(h);
             cd::linear_forward_multi_skinny(h.gpu(), c.gin, segs, &plan);
             c.expect_matches(h, segs, "skinny", false);
             if (::testing::Test::HasFailure()) return;
           }
       }});
}

// Odd shapes through the op at every row count: K % 8 != 0 goes to
// cuBLASLt, the others to the kernel; bf16 out with a bf16 bias, f32 out
// with an f32 bias.
void add_multi_odd(Cases& cases, int64_t K, std::vector<int64_t> N, uint32_t seed0) {
  cases.push_back(
      {case_name({"linear_forward_multi", "odd", "K" + std::to_string(K), "N" + std::to_string(N[0]) + "_" +
                                                                             std::to_string(N.size()) + "seg"}),
       {"linear_forward_multi"},
       "",
       {multi_bound("routed", DType::bf16, K, true), multi_bound("routed_f32", DType::f32, K, true)},
       [=](Harness& h) {
         uint32_t seed = seed0;
         for (const int64_t M : kRows)
           for (int mode = 0; mode < 2; ++mode) {
             SCOPED_TRACE(testing::Message() << "M " << M << " mode " << mode);
             const Multi c = Multi::make(h, M, K, N, mode ? DType::f32 : DType::bf16, mode ? 2 : 1, seed += 100);
             auto segs = c.outputs(h);
             ops::linear_forward_multi(h.gpu(), c.gin, segs);
             c.expect_matches(h, segs, mode ? "routed_f32" : "routed", true);
             if (::testing::Test::HasFailure()) return;
           }
       }});
}

// Views off 16-byte alignment: an unaligned input or weight (cuBLASLt), an
// unaligned output (the kernel's element stores).
void add_multi_unaligned(Cases& cases) {
  cases.push_back(
      {"linear_forward_multi_bf16_unaligned_views_M33_K256",
       {"linear_forward_multi"},
       "",
       {multi_bound("routed", DType::bf16, 256, true)},
       [=](Harness& h) {
         const int64_t M = 33, K = 256;
         const std::vector<int64_t> N = {96, 40};
         const Multi c = Multi::make(h, M, K, N, DType::bf16, 1, 9100);
         for (int what = 0; what < 3; ++what) {
           SCOPED_TRACE(testing::Message() << "unaligned " << (what == 0 ? "in" : what == 1 ? "weight" : "out"));
           const Tensor in = what == 0 ? h.upload_at(c.in, {M, K}, DType::bf16, 1) : c.gin;
           std::vector<LinearSegment> segs;
           for (size_t i = 0; i < N.size(); ++i)
             segs.push_back({h.guarded(DType::bf16, {M, N[i]}, what == 2 ? int64_t(1 + i) : 0),
                             what == 1 && i == 1 ? h.upload_at(c.w[i], {N[i], K}, DType::bf16, 3) : c.gw[i], c.gb[i]});
           ops::linear_forward_multi(h.gpu(), in, segs);
           c.expect_matches(h, segs, "routed", true);
         }
       }});
}

// A fused call and the same layers one by one on the skinny kernel, and
// the cuBLASLt path, against the CPU.
void add_multi_paths(Cases& cases, const Layer& l, int64_t M, uint32_t seed) {
  cases.push_back({case_name({"linear_forward_multi_paths", "bf16", layer_name(l), "M" + std::to_string(M)}),
                   {},
                   "cuda::detail::linear_forward_multi_skinny (fused, one segment at a time), "
                   "cuda::detail::linear_forward_multi_cublaslt",
                   {multi_bound("fused", DType::bf16, l.K, false), multi_bound("one_by_one", DType::bf16, l.K, false),
                    multi_bound("cublaslt", DType::bf16, l.K, true)},
                   [=](Harness& h) {
                     const Multi c = Multi::make(h, M, l.K, l.N, DType::bf16, l.bias ? 1 : 0, seed);
                     auto fused = c.outputs(h), single = c.outputs(h), lt = c.outputs(h);
                     cd::linear_forward_multi_skinny(h.gpu(), c.gin, fused);
                     for (const LinearSegment& seg : single)
                       cd::linear_forward_multi_skinny(h.gpu(), c.gin, std::span<const LinearSegment>(&seg, 1));
                     cd::linear_forward_multi_cublaslt(h.gpu(), c.gin, lt);
                     c.expect_matches(h, fused, "fused", false);
                     c.expect_matches(h, single, "one_by_one", false);
                     c.expect_matches(h, lt, "cublaslt", true);
                   }});
}

// cuda::linear_forward on a skinny bf16 product (the kernel) and on many
// rows (cuBLASLt), and the skinny kernel directly.
void add_linear_forward_routes(Cases& cases, int64_t M) {
  cases.push_back({case_name({"linear_forward", "bf16", dims({M, 896, 896}), "routes"}),
                   {"linear_forward"},
                   "cuda::detail::linear_forward_multi_skinny",
                   {multi_bound("skinny", DType::bf16, 896, false), multi_bound("routed", DType::bf16, 896, true)},
                   [=](Harness& h) {
                     const Multi c = Multi::make(h, M, 896, {896}, DType::bf16, 1, 12000 + uint32_t(M));
                     auto direct = c.outputs(h), routed = c.outputs(h);
                     cd::linear_forward_multi_skinny(h.gpu(), c.gin, direct);
                     ops::linear_forward(h.gpu(), routed[0].out, c.gin, c.gw[0], c.gb[0]);
                     c.expect_matches(h, direct, "skinny", false);
                     c.expect_matches(h, routed, "routed", true);
                   }});
}

// Weights (and biases) of a case copied to element offsets `at` of one
// buffer (bias i at about at[i] / K, rounded up to 8 elements).
std::vector<LinearSegment> placed(Harness& h, const Multi& c, const std::vector<int64_t>& at, bool outs_reversed) {
  int64_t w_end = 0, b_end = 0;
  std::vector<int64_t> b_at;
  for (size_t i = 0; i < c.N.size(); ++i) {
    w_end = std::max(w_end, at[i] + c.N[i] * c.K);
    b_at.push_back((at[i] / c.K + 7) / 8 * 8);
    b_end = std::max(b_end, b_at[i] + c.N[i]);
  }
  const Tensor wbuf = h.device_empty(DType::bf16, {w_end});
  const DType bdt = c.gb[0].defined() ? c.gb[0].dtype : DType::f32;
  const Tensor bbuf = h.device_empty(bdt, {b_end});
  const size_t n = c.N.size();
  std::vector<Tensor> outs(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = outs_reversed ? n - 1 - k : k;
    outs[i] = h.guarded(c.out_dt[i], {c.M, c.N[i]});
  }
  std::vector<LinearSegment> segs;
  for (size_t i = 0; i < n; ++i) {
    const Tensor w = view_at(wbuf, at[i], {c.N[i], c.K});
    h.put(w, c.w[i]);
    Tensor b;
    if (c.gb[i].defined()) {
      b = view_at(bbuf, b_at[i], {c.N[i]});
      h.put(b, c.b[i]);
    }
    segs.push_back({outs[i], w, b});
  }
  return segs;
}

// Two segments of one shape (0.5B gate/up at 128 rows, and an odd one),
// every out/bias dtype pairing, the weights adjacent, 40 MB apart, the
// second before the first, and everything second first: cuBLASLt's strided
// batch (or its fallback) against the CPU.
void add_multi_batch_two(Cases& cases, int64_t M, int64_t K, int64_t N, DType out, int bias_mode, uint32_t seed) {
  cases.push_back(
      {case_name({"linear_forward_multi_cublaslt_batch", dtn(out), dims({M, K, N}), "2seg", "bias" + std::to_string(bias_mode)}),
       {},
       "cuda::detail::linear_forward_multi_cublaslt (strided batch)",
       {multi_bound("cublaslt", out, K, true)},
       [=](Harness& h) {
         const Multi c = Multi::make(h, M, K, {N, N}, out, bias_mode, seed);
         const int64_t n = N * K;
         for (int mode = 0; mode < 4; ++mode) {
           const char* names[] = {"adjacent", "40 MB apart", "second weight first", "everything second first"};
           SCOPED_TRACE(names[mode]);
           const std::vector<int64_t> at = mode == 0   ? std::vector<int64_t>{0, n}
                                           : mode == 1 ? std::vector<int64_t>{0, n + (int64_t(20) << 20)}
                                                       : std::vector<int64_t>{n + 64, 0};
           const auto segs = placed(h, c, at, mode == 3);
           cd::linear_forward_multi_cublaslt(h.gpu(), c.gin, segs);
           c.expect_matches(h, segs, "cublaslt", true);
         }
       }});
}

// Three and more segments (batched when one step separates them all), and
// the calls that cannot batch.
struct Run {
  const char* name;
  std::vector<int64_t> N;
  std::vector<int64_t> at;  // weight offsets in units of 200 x 256 elements, plus extra elements
  std::vector<int64_t> extra;
};
void add_multi_batch_runs(Cases& cases) {
  cases.push_back(
      {"linear_forward_multi_cublaslt_batch_runs_and_fallbacks_M64_K256",
       {},
       "cuda::detail::linear_forward_multi_cublaslt (strided batch runs, fallbacks)",
       {multi_bound("cublaslt", DType::bf16, 256, true), multi_bound("cublaslt_f32", DType::f32, 256, true),
        multi_bound("qkv_0.5b", DType::bf16, 896, true), multi_bound("qkv_1.5b", DType::bf16, 1536, true)},
       [=](Harness& h) {
         const int64_t M = 64, K = 256, N = 200, n = N * K;
         uint32_t seed = 14000;
         const Run runs[] = {
             {"three evenly spaced", {N, N, N}, {0, 1, 2}, {0, 0, 0}},
             {"four evenly spaced", {N, N, N, N}, {0, 1, 2, 3}, {0, 64, 128, 192}},
             {"three, the third off the step", {N, N, N}, {0, 1, 2}, {0, 0, 64}},
             {"three, the first of another shape", {136, N, N}, {0, 1, 2}, {0, 0, 0}},
             {"unequal shapes", {N, 136}, {0, 1}, {0, 0}},
             {"second weight 2 bytes off 16-byte alignment", {N, N}, {0, 1}, {0, 1}},
             {"one segment", {N}, {0}, {0}},
         };
         for (const Run& r : runs)
           for (const int bias_mode : {0, 1}) {
             SCOPED_TRACE(testing::Message() << r.name << " bias " << bias_mode);
             const Multi c = Multi::make(h, M, K, r.N, DType::bf16, bias_mode, seed += 100);
             std::vector<int64_t> at;
             for (size_t i = 0; i < r.at.size(); ++i) at.push_back(r.at[i] * n + r.extra[i]);
             const auto segs = placed(h, c, at, false);
             cd::linear_forward_multi_cublaslt(h.gpu(), c.gin, segs);
             c.expect_matches(h, segs, "cublaslt", true);
           }
         // Outputs of different dtypes, and a bias on one segment only: no batch.
         for (int what = 0; what < 2; ++what) {
           SCOPED_TRACE(what == 0 ? "bf16 and f32 outputs" : "one bias");
           Multi c = Multi::make(h, M, K, {N, N}, DType::bf16, 1, seed += 100);
           if (what == 0) c.out_dt[1] = DType::f32;
           if (what == 1) {
             c.b[1].clear();
             c.gb[1] = Tensor{};
             c.reference(h);
           }
           auto segs = placed(h, c, {0, n}, false);
           if (what == 1) segs[1].bias = Tensor{};
           cd::linear_forward_multi_cublaslt(h.gpu(), c.gin, segs);
           for (size_t i = 0; i < segs.size(); ++i) {
             const std::vector<LinearSegment> one = {segs[i]};
             Multi ci = c;
             ci.N = {c.N[i]}, ci.w = {c.w[i]}, ci.b = {c.b[i]}, ci.want = {c.want[i]}, ci.out_dt = {c.out_dt[i]};
             ci.expect_matches(h, one, c.out_dt[i] == DType::f32 ? "cublaslt_f32" : "cublaslt", true);
           }
         }
         // The Qwen q/k/v shapes through the cuBLASLt path: q alone, k and v batched.
         for (const Layer& l : qwen_layers()) {
           if (std::string(l.layer) != "qkv") continue;
           SCOPED_TRACE(l.model);
           const Multi c = Multi::make(h, 128, l.K, l.N, DType::bf16, 1, seed += 100);
           auto segs = c.outputs(h);
           cd::linear_forward_multi_cublaslt(h.gpu(), c.gin, segs);
           c.expect_matches(h, segs, l.K == 1536 ? "qkv_1.5b" : "qkv_0.5b", true);
         }
       }});
}

// ---- the small-batch kernel (1-8 rows, cuda/gemm/gemv.cu) ----

// Row m of a one-row call equals row m of the whole call, bit for bit: the
// kernel's order depends on K alone (gemv_plan.h).
template <class Call>
void expect_rows_invariant(Harness& h, int64_t M, const std::vector<Tensor>& full, const Call& one_row) {
  std::vector<std::vector<float>> whole;
  for (const Tensor& t : full) whole.push_back(h.download(t));
  for (int64_t m = 0; m < M; ++m) {
    const std::vector<Tensor> rows = one_row(m);
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::vector<float> got = h.download(rows[i]);
      const int64_t n = int64_t(got.size());
      int64_t differ = 0;
      for (int64_t j = 0; j < n; ++j) differ += std::memcmp(&got[size_t(j)], &whole[i][size_t(m * n + j)], 4) != 0;
      EXPECT_EQ(differ, 0) << "row " << m << " of " << M << ", output " << i << ": alone differs from the batch";
    }
  }
}

// The kernel directly and the op as routed, against the CPU, at every row
// count it takes; then each row alone against the batch.
void add_gemv_multi(Cases& cases, const std::string& name, int64_t M, int64_t K, std::vector<int64_t> N, DType out_dt,
                    int bias_mode, uint32_t seed) {
  cases.push_back(
      {case_name({"linear_forward_multi_gemv", dtn(out_dt), name, "M" + std::to_string(M),
                  "bias" + std::to_string(bias_mode)}),
       {"linear_forward_multi"},
       "cuda::detail::linear_forward_multi_gemv",
       {multi_bound("gemv", out_dt, K, false), multi_bound("routed", out_dt, K, true)},
       [=](Harness& h) {
         const Multi c = Multi::make(h, M, K, N, out_dt, bias_mode, seed);
         auto direct = c.outputs(h), routed = c.outputs(h);
         ASSERT_TRUE(cd::gemv_supported(c.gin, direct));
         cd::linear_forward_multi_gemv(h.gpu(), c.gin, direct);
         ops::linear_forward_multi(h.gpu(), c.gin, routed);
         c.expect_matches(h, direct, "gemv", false);
         c.expect_matches(h, routed, "routed", true);
         std::vector<Tensor> full;
         for (const LinearSegment& s : direct) full.push_back(s.out);
         expect_rows_invariant(h, M, full, [&](int64_t m) {
           std::vector<LinearSegment> one;
           std::vector<Tensor> outs;
           for (size_t i = 0; i < N.size(); ++i) {
             outs.push_back(h.guarded(out_dt, {1, N[i]}));
             one.push_back({outs.back(), c.gw[i], c.gb[i]});
           }
           cd::linear_forward_multi_gemv(h.gpu(), c.gin.slice_rows(m, m + 1), one);
           return outs;
         });
       }});
}

// ---- linear_swiglu_forward ----

struct Swiglu {
  int64_t M, K, I;
  std::vector<float> in, wg, wu, gate, up, want;  // the CPU's f32 products and h
  Tensor gin, gwg, gwu;

  static Swiglu make(Harness& h, int64_t M, int64_t K, int64_t I, uint32_t seed) {
    Swiglu c{M, K, I, {}, {}, {}, {}, {}, {}, {}, {}, {}};
    c.in = bf16_exact(size_t(M * K), seed);
    // Weights scaled so that the products spread over SiLU's curved part.
    const float w = 3.0f / std::sqrt(float(K));
    c.wg = bf16_exact(size_t(I * K), seed + 1, -w, w), c.wu = bf16_exact(size_t(I * K), seed + 2);
    c.gate.assign(size_t(M * I), 0.0f);
    c.up.assign(size_t(M * I), 0.0f);
    c.want.assign(size_t(M * I), 0.0f);
    std::vector<float> in = c.in;  // the CPU op may use it as scratch under a norm; none here
    ops::linear_swiglu_forward(h.cpu(), host(c.want, {M, I}), host(c.gate, {M, I}), host(c.up, {M, I}),
                               host(in, {M, K}), host(c.wg, {I, K}), host(c.wu, {I, K}));
    c.gin = h.upload(c.in, {M, K}, DType::bf16);
    c.gwg = h.upload(c.wg, {I, K}, DType::bf16);
    c.gwu = h.upload(c.wu, {I, K}, DType::bf16);
    return c;
  }
  // The GPU rounds each product to bf16 before SwiGLU (as the unfused path
  // stores it) and h once more: 2^-7 of |h| and 2^-8 of each product's
  // share (SiLU's slope is at most 1.1), on top of the fp32 sums' order.
  void expect_matches(Harness& h, const Tensor& out, const std::string& output) const {
    std::vector<float> extra(want.size());
    for (size_t i = 0; i < extra.size(); ++i) extra[i] = float(0x1p-8 * 1.1 * std::fabs(double(gate[i]) * up[i]));
    h.close(output, h.download(out), want, extra);
  }
};
Bound swiglu_bound(const std::string& output, int64_t K) {
  return {output, 1e-6 + 4e-7 * double(K), 0x1p-7,
          "each product rounded to bf16 before SwiGLU (2^-8 of its share, SiLU's slope <= 1.1: the extra) and h "
          "once more (2^-7 of |h| for both roundings), fp32 sums over K in another order (4e-7 per term)"};
}

// Every width at 64 and 128 input rows a CTA, with either ring, on shapes
// with partial tiles (rows past M, columns past I, K not a multiple of 64).
void add_swiglu_every_tile(Cases& cases, int64_t M, int64_t K, int64_t I, uint32_t seed) {
  cases.push_back({case_name({"linear_swiglu_fused", "every_plan", "bf16", dims({M, K, I})}),
                   {},
                   "cuda::detail::linear_swiglu_fused (forced plans)",
                   {swiglu_bound("h", K)},
                   [=](Harness& h) {
                     const Swiglu c = Swiglu::make(h, M, K, I, seed);
                     for (const int rows : {64, 128})
                       for (const int cols : cd::linear_swiglu_widths())
                         for (const bool deep : {false, true}) {
                           SCOPED_TRACE(testing::Message() << "rows " << rows << " cols " << cols << " deep " << deep);
                           const cd::SwigluPlan plan{cols, rows, deep};
                           Tensor out = h.guarded(DType::bf16, {M, I});
                           cd::linear_swiglu_fused(h.gpu(), out, c.gin, c.gwg, c.gwu, &plan);
                           c.expect_matches(h, out, "h");
                           if (::testing::Test::HasFailure()) return;
                         }
                   }});
}

// The op as routed (fused up to its row bound, the two ops beyond) on
// Qwen2.5-0.5B's MLP shape.
void add_swiglu_routed(Cases& cases, int64_t M) {
  cases.push_back({case_name({"linear_swiglu_forward", "bf16", dims({M, 896, 4864})}),
                   {"linear_swiglu_forward"},
                   "",
                   {swiglu_bound("h", 896)},
                   [=](Harness& h) {
                     const Swiglu c = Swiglu::make(h, M, 896, 4864, 77 + uint32_t(M));
                     Tensor out = h.guarded(DType::bf16, {M, 4864});
                     Tensor gate = h.device_empty(DType::bf16, {M, 4864}), up = h.device_empty(DType::bf16, {M, 4864});
                     ops::linear_swiglu_forward(h.gpu(), out, gate, up, c.gin, c.gwg, c.gwu);
                     c.expect_matches(h, out, "h");
                   }});
}

// The wide (prefill) kernel on partial tiles: rows past M, columns past I
// (I % 8 != 0: direct stores instead of the TMA store; odd I: one value a
// store), K not a multiple of 64; 0.5B's MLP at 1100 rows.
void add_swiglu_wide(Cases& cases, int64_t M, int64_t K, int64_t I, uint32_t seed) {
  cases.push_back({case_name({"linear_swiglu_wide", "bf16", dims({M, K, I})}),
                   {},
                   "cuda::detail::linear_swiglu_wide",
                   {swiglu_bound("h", K)},
                   [=](Harness& h) {
                     if (!cd::linear_swiglu_wide_preferred(4096, 896, 4864)) GTEST_SKIP() << "no sm_90a build";
                     const Swiglu c = Swiglu::make(h, M, K, I, seed);
                     Tensor out = h.guarded(DType::bf16, {M, I});
                     cd::linear_swiglu_wide(h.gpu(), out, c.gin, c.gwg, c.gwu);
                     c.expect_matches(h, out, "h");
                   }});
}

// SwiGLU's gate/up at 1-8 rows: the kernel, the op as routed (which takes
// it), rows alone against the batch.
void add_gemv_swiglu(Cases& cases, int64_t M, int64_t K, int64_t I, uint32_t seed) {
  cases.push_back({case_name({"linear_swiglu_gemv", "bf16", dims({M, K, I})}),
                   {"linear_swiglu_forward"},
                   "cuda::detail::linear_swiglu_gemv",
                   {swiglu_bound("h", K), swiglu_bound("routed", K)},
                   [=](Harness& h) {
                     const Swiglu c = Swiglu::make(h, M, K, I, seed);
                     Tensor out = h.guarded(DType::bf16, {M, I}), routed = h.guarded(DType::bf16, {M, I});
                     Tensor gate = h.device_empty(DType::bf16, {M, I}), up = h.device_empty(DType::bf16, {M, I});
                     ASSERT_TRUE(cd::linear_swiglu_gemv_supported(out, c.gin, c.gwg, c.gwu));
                     cd::linear_swiglu_gemv(h.gpu(), out, c.gin, c.gwg, c.gwu);
                     ops::linear_swiglu_forward(h.gpu(), routed, gate, up, c.gin, c.gwg, c.gwu);
                     c.expect_matches(h, out, "h");
                     c.expect_matches(h, routed, "routed");
                     expect_rows_invariant(h, M, {out}, [&](int64_t m) {
                       Tensor one = h.guarded(DType::bf16, {1, I});
                       cd::linear_swiglu_gemv(h.gpu(), one, c.gin.slice_rows(m, m + 1), c.gwg, c.gwu);
                       return std::vector<Tensor>{one};
                     });
                   }});
}

// ---- qkv_rope_kv_write ----

struct QkvShape {
  int64_t Hq, Hkv, D, C;
};

// The op (fused where the skinny kernel takes q/k/v with whole-head tiles)
// against the CPU op: slots shuffled over a pool with every 7th token
// skipped, positions up to 32k. head_norm: with Qwen3's per-head norm of q
// and k (weights in [0.5, 1.5)), which takes the unfused path.
void add_qkv_rope(Cases& cases, int64_t T, QkvShape s, uint32_t seed, bool head_norm = false) {
  const std::string why =
      "bf16 q/k/v products (2^-8) of |in| < 2 with weights of 1/sqrt(C) and a bias, then rope's rounding "
      "(2^-8) on q and k: 2e-2 relative, 3e-2 absolute for cancellations";
  const std::string why_normed =
      "the bf16 products' error (2^-8) kept relative by the norm, the normed values' bf16 rounding (2^-8) with "
      "|normed| < 4.5, then rope's rounding (2^-8): 2e-2 relative, 5e-2 absolute for cancellations";
  const double qk_atol = head_norm ? 5e-2 : 3e-2;
  const std::string& qk_why = head_norm ? why_normed : why;
  cases.push_back(
      {case_name({"qkv_rope_kv_write", "bf16", dims({T, s.C, s.Hq, s.Hkv, s.D}), head_norm ? "headnorm" : ""}),
       {"qkv_rope_kv_write"},
       "",
       {{"q", qk_atol, 2e-2, qk_why}, {"k", qk_atol, 2e-2, qk_why}, {"v", 3e-2, 2e-2, why},
        {"k_cache", qk_atol, 2e-2, qk_why}, {"v_cache", 3e-2, 2e-2, why}},
       [=](Harness& h) {
         const int64_t BS = 16, NB = (2 * T + 40) / 16 + 1, Nq = s.Hq * s.D, Nkv = s.Hkv * s.D;
         std::mt19937 gen(seed);
         std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T)), all(size_t(NB * BS));
         std::iota(all.begin(), all.end(), 0);
         std::shuffle(all.begin(), all.end(), gen);
         for (int64_t i = 0; i < T; ++i) {
           pos[size_t(i)] = i == 0 ? 0 : i == 1 ? 32767 : int32_t(gen() % 32768);
           slots[size_t(i)] = i % 7 == 2 ? -1 : all[size_t(i)];
         }
         const float w = 1.0f / std::sqrt(float(s.C));
         auto in = bf16_exact(size_t(T * s.C), seed + 1, -2, 2);
         auto wq = bf16_exact(size_t(Nq * s.C), seed + 2, -w, w), wk = bf16_exact(size_t(Nkv * s.C), seed + 3, -w, w);
         auto wv = bf16_exact(size_t(Nkv * s.C), seed + 4, -w, w);
         auto bq = bf16_exact(size_t(Nq), seed + 5), bk = bf16_exact(size_t(Nkv), seed + 6);
         auto bv = bf16_exact(size_t(Nkv), seed + 7);
         auto kc = bf16_exact(size_t(NB * BS * Nkv), seed + 8), vc = bf16_exact(kc.size(), seed + 9);
         const Tensor q = h.guarded(DType::bf16, {T, Nq}), k = h.guarded(DType::bf16, {T, Nkv}),
                      v = h.guarded(DType::bf16, {T, Nkv});
         const Tensor gkc = h.guarded_from(kc, {NB, BS, s.Hkv, s.D}, DType::bf16),
                      gvc = h.guarded_from(vc, {NB, BS, s.Hkv, s.D}, DType::bf16);
         const std::vector<LinearSegment> segs = {
             {q, h.upload(wq, {Nq, s.C}, DType::bf16), h.upload(bq, {Nq}, DType::bf16)},
             {k, h.upload(wk, {Nkv, s.C}, DType::bf16), h.upload(bk, {Nkv}, DType::bf16)},
             {v, h.upload(wv, {Nkv, s.C}, DType::bf16), h.upload(bv, {Nkv}, DType::bf16)}};
         auto wqn = bf16_exact(size_t(s.D), seed + 10, 0.5f, 1.5f), wkn = bf16_exact(size_t(s.D), seed + 11, 0.5f, 1.5f);
         ops::HeadNorm ghn, chn;
         if (head_norm) {
           ghn = {h.upload(wqn, {s.D}, DType::bf16), h.upload(wkn, {s.D}, DType::bf16), 1e-6f};
           chn = {host(wqn, {s.D}), host(wkn, {s.D}), 1e-6f};
         }
         ops::qkv_rope_kv_write(h.gpu(), h.upload(in, {T, s.C}, DType::bf16), segs, gkc, gvc, h.upload_raw(pos, {T}),
                                h.upload_raw(slots, {T}), ops::kRopeThetaQwen2, {}, ghn);
         std::vector<float> hq(size_t(T * Nq)), hk(size_t(T * Nkv)), hv(size_t(T * Nkv));
         const std::vector<LinearSegment> hsegs = {{host(hq, {T, Nq}), host(wq, {Nq, s.C}), host(bq, {Nq})},
                                                   {host(hk, {T, Nkv}), host(wk, {Nkv, s.C}), host(bk, {Nkv})},
                                                   {host(hv, {T, Nkv}), host(wv, {Nkv, s.C}), host(bv, {Nkv})}};
         ops::qkv_rope_kv_write(h.cpu(), host(in, {T, s.C}), hsegs, host(kc, {NB, BS, s.Hkv, s.D}),
                                host(vc, {NB, BS, s.Hkv, s.D}), host_t(pos, {T}), host_t(slots, {T}),
                                ops::kRopeThetaQwen2, {}, chn);
         h.close("q", h.download(q), hq);
         h.close("k", h.download(k), hk);
         h.close("v", h.download(v), hv);
         h.close("k_cache", h.download(gkc), kc);
         h.close("v_cache", h.download(gvc), vc);
       }});
}

}  // namespace

void add_gemm_cases(Cases& cases) {
  for (const Dtypes dt : kDtypes) {
    const MNK shapes[] = {{37, 1000, 129}, {64, 128, 256}, {1, 7, 300}, {130, 33, 1}, {16, 24, 8192}};
    for (size_t i = 0; i < std::size(shapes); ++i) add_matmul(cases, dt, shapes[i], 100 + uint32_t(i) * 36);
    add_matmul_zero(cases, dt);
    add_matmul_misaligned(cases, dt);
    const NIO fwd[] = {{37, 129, 1000}, {1, 1536, 256}, {300, 64, 1}, {0, 16, 8}, {6, 0, 11}};
    for (size_t i = 0; i < std::size(fwd); ++i) add_linear_forward(cases, dt, fwd[i], 200 + uint32_t(i) * 9);
    const NIO res[] = {{600, 896, 896}, {37, 129, 1000}, {513, 72, 24}, {0, 16, 8}, {6, 0, 11}};
    for (size_t i = 0; i < std::size(res); ++i) add_linear_residual(cases, dt, res[i], 400 + uint32_t(i) * 6);
    const NIO bwd[] = {{37, 129, 1000}, {1000, 96, 37}, {2048, 256, 70}, {0, 16, 8}, {9, 0, 5}, {9, 5, 0}};
    for (size_t i = 0; i < std::size(bwd); ++i) add_linear_backward(cases, dt, bwd[i], 300 + uint32_t(i) * 20);
    add_linear_large(cases, dt);
  }
  {
    uint32_t seed = 1000;
    int combo = 0;
    for (const Layer& l : qwen_layers())
      for (const int64_t M : kRows) {
        const DType out_dt = combo % 2 == 0 ? DType::bf16 : DType::f32;
        const int bias_mode = l.bias ? 1 + (combo / 2) % 2 : (combo / 2) % 3;
        ++combo;
        add_multi_qwen(cases, l, M, out_dt, bias_mode, seed += 100);
      }
  }
  for (const int64_t M : {int64_t(1), int64_t(17), int64_t(200)}) add_multi_lm_head(cases, M);
  {
    struct Odd {
      int64_t K;
      std::vector<int64_t> N;
    };
    uint32_t seed = 5000;
    for (const Odd& o : {Odd{904, {200, 8, 72}}, Odd{24, {5}}, Odd{40, {5, 3, 130, 1}}, Odd{1160, {260}}})
      for (const int64_t M : {int64_t(1), int64_t(17), int64_t(200), int64_t(300)})
        add_multi_every_plan(cases, o.K, o.N, M, seed += 100);
    const Odd odds[] = {{24, {5}}, {40, {5, 7}}, {20, {9, 3}}, {8, {1}}, {1, {4}}};
    for (size_t i = 0; i < std::size(odds); ++i)
      add_multi_odd(cases, odds[i].K, odds[i].N, 7000 + uint32_t(i) * 1600);
  }
  add_multi_unaligned(cases);
  {
    uint32_t seed = 11000;
    for (const Layer& l : qwen_layers())
      for (const int64_t M : {int64_t(3), int64_t(64), int64_t(200)}) add_multi_paths(cases, l, M, seed += 100);
  }
  for (const int64_t M : {int64_t(5), int64_t(128), int64_t(1000)}) add_linear_forward_routes(cases, M);
  {
    struct D3 {
      int64_t M, K, N;
    };
    struct Dt {
      DType out;
      int bias_mode;
    };
    uint32_t seed = 13000;
    for (const D3 d : {D3{128, 896, 4864}, D3{37, 264, 200}})
      for (const Dt dt : {Dt{DType::bf16, 0}, Dt{DType::bf16, 1}, Dt{DType::f32, 2}, Dt{DType::bf16, 2},
                          Dt{DType::f32, 0}, Dt{DType::f32, 1}})
        add_multi_batch_two(cases, d.M, d.K, d.N, dt.out, dt.bias_mode, seed += 100);
  }
  add_multi_batch_runs(cases);
  {
    // Every row count the small-batch kernel takes, on the Qwen products and
    // on odd ones: K of 1 to 300 pieces (threads of one warp to the most,
    // pieces left over), segments that end inside a CTA's rows, four
    // segments, an empty one, f32 and bf16 outputs and biases.
    uint32_t seed = 21000;
    int combo = 0;
    for (const Layer& l : qwen_layers())
      for (const int64_t M : {int64_t(1), int64_t(2), int64_t(3), int64_t(8)}) {
        const DType out_dt = combo % 2 == 0 ? DType::bf16 : DType::f32;
        const int bias_mode = l.bias ? 1 + (combo / 2) % 2 : (combo / 2) % 3;
        ++combo;
        add_gemv_multi(cases, layer_name(l), M, l.K, l.N, out_dt, bias_mode, seed += 100);
      }
    struct Odd {
      const char* name;
      int64_t K;
      std::vector<int64_t> N;
    };
    for (const Odd& o : {Odd{"K8", 8, {5}}, Odd{"K40_4seg", 40, {5, 3, 130, 1}}, Odd{"K2400", 2400, {37, 0, 6}},
                         Odd{"K904", 904, {200, 8, 72}}})
      for (const int64_t M : {int64_t(4), int64_t(5), int64_t(6), int64_t(7)})
        add_gemv_multi(cases, o.name, M, o.K, o.N, M % 2 ? DType::f32 : DType::bf16, int(M % 3), seed += 100);
  }
  {
    struct S {
      int64_t M, K, I;
    };
    uint32_t seed = 10;
    for (const S s : {S{1, 64, 40}, S{37, 136, 100}, S{64, 896, 96}, S{100, 200, 300}, S{128, 896, 200}, S{200, 96, 72}})
      add_swiglu_every_tile(cases, s.M, s.K, s.I, seed += 10);
    for (const int64_t M : {0, 1, 17, 128, 129, 300, 1100}) add_swiglu_routed(cases, M);
    for (const S s : {S{1, 1536, 8960}, S{8, 1536, 8960}, S{3, 896, 4864}, S{5, 136, 37}, S{7, 2056, 6}, S{2, 8, 1}})
      add_gemv_swiglu(cases, s.M, s.K, s.I, seed += 10);
    seed = 500;
    for (const S s : {S{300, 136, 200}, S{129, 64, 131}, S{1100, 896, 4864}, S{40, 200, 300}, S{520, 72, 136}})
      add_swiglu_wide(cases, s.M, s.K, s.I, seed += 10);
  }
  add_qkv_rope(cases, 33, QkvShape{14, 2, 64, 896}, 4242);    // 0.5B, the tuned case
  add_qkv_rope(cases, 128, QkvShape{12, 2, 128, 1536}, 4343);  // 1.5B at a decode batch of 128
  add_qkv_rope(cases, 33, QkvShape{16, 8, 128, 1024}, 4444, true);   // Qwen3-0.6B, with its head norm
  add_qkv_rope(cases, 128, QkvShape{16, 8, 128, 1024}, 4545, true);
}

}  // namespace dapo::test::backend_ops
