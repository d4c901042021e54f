// Harness cases of the elementwise and memory ops: swiglu, rope,
// rope_kv_write, adamw_step, sum_squares, cast, fill, copy, embedding, the
// KV cache writes and block copies, and the step I/O.
#include <algorithm>
#include <numeric>

#include "dapo/ops/adamw.h"
#include "dapo/ops/cast.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/embedding.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/kv_copy.h"
#include "dapo/ops/rope.h"
#include "dapo/ops/step_io.h"
#include "dapo/ops/sum_squares.h"
#include "dapo/ops/swiglu.h"
#include "gpu/backend_ops.h"
#include "gpu/op_shapes.h"

namespace dapo::test::backend_ops {
namespace {

std::string dtn(DType dt) { return dtype_name(dt); }

// ---- swiglu ----

// 37 x 1000: whole 16-byte packs; 37 x 1001 and 1 x 5: a tail; shift 1:
// every tensor off 16-byte alignment (the element path); no rows.
void add_swiglu(Cases& cases, int64_t N, int64_t I, int64_t shift, DType dt) {
  const double tol = dt == DType::f32 ? 1e-5 : 8e-3;
  const std::string why = dt == DType::f32 ? "fp32 silu (expf) against the CPU's: a few ulps of values up to ~6"
                                           : "one bf16 rounding of the output (2^-8 relative), twice for safety";
  const std::string shape = dims({N, I}) + (shift ? "_shift" + std::to_string(shift) : "");
  auto inputs = [=](std::vector<float>& gate, std::vector<float>& up, std::vector<float>& dout) {
    gate = bf16_exact(size_t(N * I), 1, -6, 6), up = bf16_exact(size_t(N * I), 2), dout = bf16_exact(size_t(N * I), 3);
  };
  cases.push_back({case_name({"swiglu_forward", dtn(dt), shape}),
                   {"swiglu_forward"},
                   "",
                   {{"out", tol, tol, why}},
                   [=](Harness& h) {
                     std::vector<float> gate, up, dout, out(size_t(N * I));
                     inputs(gate, up, dout);
                     ops::swiglu_forward(h.cpu(), host(out, {N, I}), host(gate, {N, I}), host(up, {N, I}));
                     Tensor o = h.guarded(dt, {N, I}, shift);
                     ops::swiglu_forward(h.gpu(), o, h.upload_at(gate, {N, I}, dt, shift),
                                         h.upload_at(up, {N, I}, dt, shift));
                     h.close("out", h.download(o), out);
                   }});
  cases.push_back({case_name({"swiglu_backward", dtn(dt), shape}),
                   {"swiglu_backward"},
                   "",
                   {{"dgate", tol, tol, why}, {"dup", tol, tol, why}},
                   [=](Harness& h) {
                     std::vector<float> gate, up, dout, dgate(size_t(N * I)), dup(size_t(N * I));
                     inputs(gate, up, dout);
                     ops::swiglu_backward(h.cpu(), host(dgate, {N, I}), host(dup, {N, I}), host(dout, {N, I}),
                                          host(gate, {N, I}), host(up, {N, I}));
                     Tensor dg = h.guarded(dt, {N, I}, shift), du = h.guarded(dt, {N, I}, shift);
                     ops::swiglu_backward(h.gpu(), dg, du, h.upload_at(dout, {N, I}, dt, shift),
                                          h.upload_at(gate, {N, I}, dt, shift), h.upload_at(up, {N, I}, dt, shift));
                     h.close("dgate", h.download(dg), dgate);
                     h.close("dup", h.download(du), dup);
                   }});
}

// ---- rope ----

// D = 64 and 128 (16-byte packs), an odd half (D = 6: the element path),
// positions up to 32767 (where the fp32 angle recipe matters), no tokens,
// one token, a prefill of 4096.
void add_rope(Cases& cases, int64_t T, int64_t H, int64_t D, DType dt) {
  const double tol = dt == DType::f32 ? 2e-6 : 8e-3;
  const std::string why = dt == DType::f32
                              ? "cos/sin (sincosf) may differ from the CPU's libm in the last bit: |x| < 2 -> ~2e-7, "
                                "10x margin"
                              : "one bf16 rounding of each rotated element (2^-8 relative, |x| < 2.9)";
  auto positions = [=] { return shapes::rope_positions(T, D); };
  cases.push_back({case_name({"rope_forward", dtn(dt), dims({T, H, D})}),
                   {"rope_forward"},
                   "",
                   {{"out", tol, tol, why}},
                   [=](Harness& h) {
                     auto pos = positions();
                     auto x = bf16_exact(size_t(T * H * D), 1, -2, 2);
                     std::vector<float> y(x.size());
                     ops::rope_forward(h.cpu(), host(y, {T, H, D}), host(x, {T, H, D}), host_t(pos, {T}),
                                       ops::kRopeThetaQwen2);
                     Tensor gy = h.guarded(dt, {T, H, D});
                     ops::rope_forward(h.gpu(), gy, h.upload(x, {T, H, D}, dt), h.upload_raw(pos, {T}),
                                       ops::kRopeThetaQwen2);
                     h.close("out", h.download(gy), y);
                   }});
  cases.push_back({case_name({"rope_backward", dtn(dt), dims({T, H, D})}),
                   {"rope_backward"},
                   "",
                   {{"din", tol, tol, why}},
                   [=](Harness& h) {
                     auto pos = positions();
                     auto dy = bf16_exact(size_t(T * H * D), 2, -2, 2);
                     std::vector<float> dx(dy.size());
                     ops::rope_backward(h.cpu(), host(dx, {T, H, D}), host(dy, {T, H, D}), host_t(pos, {T}),
                                        ops::kRopeThetaQwen2);
                     Tensor gdx = h.guarded(dt, {T, H, D});
                     ops::rope_backward(h.gpu(), gdx, h.upload(dy, {T, H, D}, dt), h.upload_raw(pos, {T}),
                                        ops::kRopeThetaQwen2);
                     h.close("din", h.download(gdx), dx);
                   }});
}

// ---- rope_kv_write ----

// Decode batches of 0..1000 tokens and a 4096-token prefill, positions up to
// 32k, slots spread over a shuffled pool of about twice the batch with every
// 7th token skipped (-1); q shift > 0: q that many elements off alignment.
// head_norm: with Qwen3's per-head norm (weights in [0.5, 1.5) for q,
// [-1, 1) for k).
void add_rope_kv_write(Cases& cases, const shapes::RopeKvRun& r, bool head_norm = false) {
  const int64_t T = r.T, q_shift = r.q_shift;
  const shapes::Heads hd = r.heads;
  const uint32_t seed = r.seed;
  const Bound rot = head_norm
                        ? Bound{"", 3e-2, 8e-3,
                                "the normed pair (a, b) rounded to bf16 (2^-8 relative) then rotated: at most "
                                "2^-8 * sqrt(a^2 + b^2) absolute where the pair cancels, < 2.5e-2 as |a|, |b| < "
                                "4.5 (|x| / rms < 3 at these rows, |weight| < 1.5); plus the rotated element's own "
                                "bf16 rounding (2^-8 relative)"}
                        : Bound{"", 8e-3, 8e-3,
                                "rope's bf16 bound: one bf16 rounding of each rotated element (2^-8, |x| < 2.9)"};
  Bound bq = rot, bk = rot, bkc = rot;
  bq.output = "q", bk.output = "k", bkc.output = "k_cache";
  cases.push_back(
      {case_name({"rope_kv_write", "bf16", dims({T, hd.Hq, hd.Hkv, hd.D}), q_shift ? "qshift" + std::to_string(q_shift) : "",
                  head_norm ? "headnorm" : ""}),
       {"rope_kv_write"},
       "",
       {bq, bk, bkc, {"v_cache", 0, 0, "v copied into its slots (bf16-exact values): exact"}},
       [=](Harness& h) {
         const int64_t Hq = hd.Hq, Hkv = hd.Hkv, D = hd.D, BS = 16, NB = (2 * T + 40) / BS + 1;
         std::mt19937 gen(seed);
         std::vector<int32_t> pos(static_cast<size_t>(T)), all(static_cast<size_t>(NB * BS)), slots(pos.size());
         for (auto& p : pos) p = int32_t(gen() % 32768);
         if (T > 1) pos[0] = 0, pos[1] = 32767;
         std::iota(all.begin(), all.end(), 0);
         std::shuffle(all.begin(), all.end(), gen);
         for (int64_t i = 0; i < T; ++i) slots[size_t(i)] = i % 7 == 2 ? -1 : all[size_t(i)];
         auto q = bf16_exact(size_t(T * Hq * D), seed + 1, -2, 2), k = bf16_exact(size_t(T * Hkv * D), seed + 2, -2, 2);
         auto v = bf16_exact(k.size(), seed + 3, -2, 2);
         auto kc = bf16_exact(size_t(NB * BS * Hkv * D), seed + 4), vc = bf16_exact(kc.size(), seed + 5);
         Tensor q2 = h.guarded_from(q, {T, Hq, D}, DType::bf16, q_shift);
         Tensor k2 = h.guarded_from(k, {T, Hkv, D}, DType::bf16), v2 = h.upload(v, {T, Hkv, D}, DType::bf16);
         Tensor kc2 = h.guarded_from(kc, {NB, BS, Hkv, D}, DType::bf16),
                vc2 = h.guarded_from(vc, {NB, BS, Hkv, D}, DType::bf16);
         auto wq = bf16_exact(size_t(D), seed + 6, 0.5f, 1.5f), wk = bf16_exact(size_t(D), seed + 7);
         ops::HeadNorm ghn, chn;
         if (head_norm) {
           ghn = {h.upload(wq, {D}, DType::bf16), h.upload(wk, {D}, DType::bf16), 1e-6f};
           chn = {host(wq, {D}), host(wk, {D}), 1e-6f};
         }
         ops::rope_kv_write(h.gpu(), q2, k2, kc2, vc2, v2, h.upload_raw(pos, {T}), h.upload_raw(slots, {T}),
                            ops::kRopeThetaQwen2, ghn);
         ops::rope_kv_write(h.cpu(), host(q, {T, Hq, D}), host(k, {T, Hkv, D}), host(kc, {NB, BS, Hkv, D}),
                            host(vc, {NB, BS, Hkv, D}), host(v, {T, Hkv, D}), host_t(pos, {T}), host_t(slots, {T}),
                            ops::kRopeThetaQwen2, chn);
         h.close("q", h.download(q2), q);
         h.close("k", h.download(k2), k);
         h.close("k_cache", h.download(kc2), kc);
         h.same("v_cache", h.download(vc2), vc);
       }});
}

// ---- adamw_step ----

// Three steps over a million + 3 elements, one vector, 7 and none, each
// aligned and one element off (offset 1: not 16-byte aligned), with the bf16
// copy; gradients spread over 4 decades.
void add_adamw(Cases& cases, int64_t N, int64_t offset) {
  const std::string ulp_why =
      "the same fp32 operations in the same order on both backends, no FMA on the GPU; the CPU compiler may "
      "contract to FMA: at most 2 ulp";
  cases.push_back(
      {case_name({"adamw_step", "f32", "N" + std::to_string(N), offset ? "offset1" : ""}),
       {"adamw_step"},
       "",
       {{"param", 2, 0, ulp_why},
        {"exp_avg", 2, 0, ulp_why},
        {"exp_avg_sq", 2, 0, ulp_why},
        {"param_bf16", 0, 0, "the CPU's copy: bf16(param) rounded to nearest even, bit for bit"},
        {"param_bf16_of_gpu_param", 0, 0, "the copy is the rounded GPU param, bit for bit"}},
       [=](Harness& h) {
         auto w = bf16_exact(size_t(N), 1, -1, 1);
         std::vector<float> m(size_t(N), 0.0f), v(size_t(N), 0.0f);
         std::vector<bf16> copy(static_cast<size_t>(N));
         Tensor dw = h.guarded_view(DType::f32, N, offset), dm = h.guarded_view(DType::f32, N, offset);
         Tensor dv = h.guarded_view(DType::f32, N, offset), dg = h.guarded_view(DType::f32, N, offset);
         Tensor db = h.guarded_view(DType::bf16, N, offset);
         h.put(dw, w);
         h.put(dm, m);
         h.put(dv, v);
         ops::AdamWParams p;
         p.lr = 1e-3f;
         p.weight_decay = 0.1f;
         p.beta2 = 0.95f;
         p.grad_scale = 0.37f;
         for (int step = 1; step <= 3; ++step) {
           SCOPED_TRACE(testing::Message() << "step " << step);
           p.step = step;
           auto g = bf16_exact(size_t(N), uint32_t(10 + step), -2, 2);
           for (int64_t i = 0; i < N; i += 7) g[size_t(i)] *= 1e-4f;
           h.put(dg, g);
           ops::adamw_step(h.cpu(), host(w, {N}), host(g, {N}), host(m, {N}), host(v, {N}), host_t(copy, {N}), p);
           ops::adamw_step(h.gpu(), dw, dg, dm, dv, db, p);
           const auto gw = h.download(dw);
           h.within_ulps("param", gw, w);
           h.within_ulps("exp_avg", h.download(dm), m);
           h.within_ulps("exp_avg_sq", h.download(dv), v);
           const auto bits = h.download_bits16(db);
           std::vector<uint16_t> cpu_bits(static_cast<size_t>(N)), rounded(static_cast<size_t>(N));
           for (int64_t i = 0; i < N; ++i) cpu_bits[size_t(i)] = copy[size_t(i)].bits, rounded[size_t(i)] = to_bf16(gw[size_t(i)]).bits;
           h.same("param_bf16", bits, cpu_bits);
           h.same("param_bf16_of_gpu_param", bits, rounded);
           if (::testing::Test::HasFailure()) return;
         }
       }});
}

// ---- sum_squares ----

void add_sum_squares(Cases& cases, int64_t N) {
  cases.push_back({case_name({"sum_squares", "f32", "N" + std::to_string(N)}),
                   {"sum_squares"},
                   "",
                   {{"out", 1, 0, "both backends sum in double (other chunks) and round once: at most 1 ulp"},
                    {"out_vs_double", 1e-30, 1e-6, "a plain double sum on the host: within the fp32 rounding, 1e-6"}},
                   [=](Harness& h) {
                     auto x = bf16_exact(size_t(N), uint32_t(N % 1000 + 3), -3, 3);
                     for (int64_t i = 0; i < N; i += 13) x[size_t(i)] *= 1e-3f;  // a spread of magnitudes
                     double want = 0;
                     for (float f : x) want += double(f) * double(f);
                     Tensor a = h.guarded_view(DType::f32, N, 0), out = h.guarded(DType::f32, {1});
                     h.put(a, x);
                     ops::sum_squares(h.gpu(), out, a);
                     float cpu_out = -1;
                     ops::sum_squares(h.cpu(), Tensor(&cpu_out, DType::f32, {1}), host(x, {N}));
                     const auto got = h.download(out);
                     h.within_ulps("out", got, {cpu_out});
                     h.close("out_vs_double", got, {float(want)});
                   }});
}

// ---- cast ----

std::vector<float> special_floats() {
  const uint32_t bits[] = {0x3f800000u, 0xbf800000u, 0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u,
                           0x3f808001u, 0x3f807fffu, 0xbf818000u, 0x40490fdbu, 0x7f800000u, 0xff800000u,
                           0x7f7f0000u, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x00010000u,
                           0x00008000u, 0x00018000u, 0x007fffffu, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                           0x7fa00000u, 0xff812345u, 0x7fffffffu, 0x00000001u};
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(from_bits(b));
  return v;
}

// Values with low bits set (real rounding, ties), every special value
// (infinities, NaN payloads, -0, denormals, the largest finite floats that
// round to inf), one or both buffers off 16-byte alignment.
void add_cast(Cases& cases, int64_t N, int64_t offset) {
  cases.push_back(
      {case_name({"cast", "f32_bf16_i64", "N" + std::to_string(N), offset ? "offset1" : ""}),
       {"cast"},
       "",
       {{"bf16", 0, 0, "f32 -> bf16 round to nearest even, NaN payloads: the CPU's bits"},
        {"f32", 0, 0, "bf16 -> f32 is exact"},
        {"copy", 0, 0, "same dtype: a copy (and a no-op onto itself)"},
        {"i64", 0, 0, "same dtype: a copy"}},
       [=](Harness& h) {
         std::vector<float> x = bf16_exact(size_t(N), 9, -100, 100);
         std::mt19937 gen(static_cast<uint32_t>(N));
         for (auto& f : x) f = from_bits(bits_of(f) ^ (gen() & 0xffffu));
         const auto specials = special_floats();
         for (size_t i = 0; i < specials.size() && i < x.size(); ++i) x[i * 7 % x.size()] = specials[i];
         std::vector<bf16> want(static_cast<size_t>(N));
         ops::cast(h.cpu(), host_t(want, {N}), host(x, {N}));
         std::vector<uint16_t> want_bits(static_cast<size_t>(N));
         for (int64_t i = 0; i < N; ++i) want_bits[size_t(i)] = want[size_t(i)].bits;
         std::vector<float> wide(static_cast<size_t>(N));
         ops::cast(h.cpu(), host(wide, {N}), host_t(want, {N}));
         Tensor in = h.guarded_view(DType::f32, N, offset);
         h.put(in, x);
         // out off alignment when in is aligned, and the other way round.
         Tensor out = h.guarded_view(DType::bf16, N, offset == 0 ? 1 : 0), out2 = h.guarded_view(DType::bf16, N, offset);
         ops::cast(h.gpu(), out, in);
         ops::cast(h.gpu(), out2, in);
         h.same("bf16", h.download_bits16(out), want_bits);
         h.same("bf16", h.download_bits16(out2), want_bits);
         Tensor back = h.guarded_view(DType::f32, N, offset);
         ops::cast(h.gpu(), back, out2);
         h.same("f32", h.download(back), wide);
         Tensor copy = h.guarded_view(DType::f32, N, offset);
         ops::cast(h.gpu(), copy, in);
         h.same("copy", h.download(copy), x);
         ops::cast(h.gpu(), copy, copy);
         h.same("copy", h.download(copy), x);
         std::vector<int64_t> ids(static_cast<size_t>(N)), ids_cpu(static_cast<size_t>(N));
         for (int64_t i = 0; i < N; ++i) ids[size_t(i)] = (int64_t(1) << 40) + i * 977;
         ops::cast(h.cpu(), host_t(ids_cpu, {N}), host_t(ids, {N}));
         Tensor i64_out = h.guarded(DType::i64, {N});
         ops::cast(h.gpu(), i64_out, h.upload_raw(ids, {N}));
         h.same("i64", h.download_raw<int64_t>(i64_out), ids_cpu);
       }});
}

// ---- fill ----

// Every dtype, values whose bytes are all equal (0, -1: the memset path)
// and others (the kernel), odd sizes at offsets 0, 1 and 3 elements.
void add_fill(Cases& cases, DType dt, std::vector<double> values) {
  cases.push_back({case_name({"fill", dtn(dt)}),
                   {"fill"},
                   "",
                   {{"t", 0, 0, "the value converted to the dtype as the CPU does: the same bytes"}},
                   [=](Harness& h) {
                     for (const double value : values)
                       for (const int64_t N : {int64_t(1), int64_t(3), int64_t(17), int64_t(1000003)})
                         for (const int64_t offset : {int64_t(0), int64_t(1), int64_t(3)}) {
                           SCOPED_TRACE(testing::Message() << value << " N=" << N << " offset=" << offset);
                           const size_t es = dtype_size(dt);
                           std::vector<unsigned char> want(size_t(N) * es, 0x5a), got(size_t(N) * es);
                           ops::fill(h.cpu(), Tensor(want.data(), dt, {N}), value);
                           Tensor t = h.guarded_view(dt, N, offset);
                           ops::fill(h.gpu(), t, value);
                           h.device().copy_to_host(Tensor(got.data(), dt, {N}), t);
                           h.same("t", got, want);
                         }
                   }});
}

// ---- copy ----

// Host -> device (pageable and pinned), device -> device into another
// shape, device -> host, then stream_synchronize: the CPU op's bytes.
void add_copy(Cases& cases, DType dt, int64_t n) {
  cases.push_back(
      {case_name({"copy", dtn(dt), "N" + std::to_string(n)}),
       {"copy", "stream_synchronize"},
       "",
       {{"dst", 0, 0, "a copy: the same bytes"}},
       [=](Harness& h) {
         const size_t bytes = size_t(n) * dtype_size(dt);
         std::vector<unsigned char> src(bytes), want(bytes, 0), got(bytes, 0);
         std::mt19937 gen(uint32_t(n) + 5);
         for (auto& b : src) b = static_cast<unsigned char>(gen());
         ops::copy(h.cpu(), Tensor(want.data(), dt, {n}), Tensor(src.data(), dt, {n}));
         ops::stream_synchronize(h.cpu());
         const ops::Ctx g = h.gpu();
         auto* pinned = static_cast<unsigned char*>(h.pinned().alloc_bytes(std::max<size_t>(bytes, 16)));
         std::memcpy(pinned, src.data(), bytes);
         Tensor a = h.guarded(dt, {n}), b = h.guarded(dt, {1, n}), c = h.guarded(dt, {n});
         ops::copy(g, a, Tensor(src.data(), dt, {n}));              // pageable host -> device
         ops::copy(g, c, Tensor(pinned, dt, {n}));                  // pinned host -> device
         ops::copy(g, b, a);                                        // device -> device, another shape
         ops::copy(g, Tensor(got.data(), dt, {1, n}), b);           // device -> host
         ops::stream_synchronize(g);
         h.same("dst", got, want);
         std::vector<unsigned char> from_pinned(bytes);
         if (n > 0) h.device().copy_to_host(Tensor(from_pinned.data(), dt, {n}), c);
         h.same("dst", from_pinned, want);
       }});
}

// ---- embedding ----

void add_embedding(Cases& cases, const std::string& tag, std::vector<int32_t> ids, int64_t V, int64_t C,
                   int64_t vocab_start, uint32_t seed, DType dt) {
  const int64_t N = int64_t(ids.size());
  const std::string shape = "N" + std::to_string(N) + "_V" + std::to_string(V) + "_C" + std::to_string(C) + "_start" +
                            std::to_string(vocab_start);
  cases.push_back({case_name({"embedding_forward", dtn(dt), shape, tag}),
                   {"embedding_forward"},
                   "",
                   {{"out", 0, 0, "rows copied bit for bit, zero rows for ids outside the shard"}},
                   [=](Harness& h) {
                     auto idv = ids;
                     auto w = bf16_exact(size_t(V * C), seed);
                     std::vector<float> out(size_t(N * C));
                     ops::embedding_forward(h.cpu(), host(out, {N, C}), host_t(idv, {N}), host(w, {V, C}), vocab_start);
                     Tensor gout = h.guarded(dt, {N, C});
                     ops::embedding_forward(h.gpu(), gout, h.upload_raw(idv, {N}), h.upload(w, {V, C}, dt),
                                            vocab_start);
                     h.same("out", h.download(gout), out);
                   }});
  // Repeats of an id are summed in another grouping than the CPU's: an fp32
  // rounding (~6e-8 relative) per repeat, 1e-6 each.
  int64_t most = 1;
  {
    std::vector<int64_t> count(size_t(V), 0);
    for (int32_t id : ids)
      if (id >= vocab_start && id < vocab_start + V) most = std::max(most, ++count[size_t(id - vocab_start)]);
  }
  cases.push_back(
      {case_name({"embedding_backward", dtn(dt), shape, tag}),
       {"embedding_backward"},
       "",
       {{"dweight", 1e-6 * double(most), 1e-6,
         "repeats of an id summed in another grouping than the CPU's: 1e-6 per repeat of the most repeated id"}},
       [=](Harness& h) {
         auto idv = ids;
         auto dout = bf16_exact(size_t(N * C), seed + 1), dw0 = bf16_exact(size_t(V * C), seed + 2);  // ACCUMULATED
         std::vector<float> dw = dw0;
         ops::embedding_backward(h.cpu(), host(dw, {V, C}), host(dout, {N, C}), host_t(idv, {N}), vocab_start);
         Tensor gdw = h.guarded_from(dw0, {V, C});
         ops::embedding_backward(h.gpu(), gdw, h.upload(dout, {N, C}, dt), h.upload_raw(idv, {N}), vocab_start);
         h.close("dweight", h.download(gdw), dw);
       }});
}

// ---- KV cache ----

// 2 x 128 rows (16-byte copies), rows of 12 elements (the element path), no
// tokens; every 4th token skipped (-1), slots shuffled over the pool.
void add_kv_cache_write(Cases& cases, int64_t NB, int64_t BS, int64_t Hkv, int64_t D, int64_t N) {
  cases.push_back({case_name({"kv_cache_write", "bf16", dims({NB, BS, Hkv, D}), "N" + std::to_string(N)}),
                   {"kv_cache_write"},
                   "",
                   {{"k_cache", 0, 0, "rows copied: exact"}, {"v_cache", 0, 0, "rows copied: exact"}},
                   [=](Harness& h) {
                     const int64_t slots_total = NB * BS;
                     std::vector<int32_t> all(static_cast<size_t>(slots_total));
                     std::iota(all.begin(), all.end(), 0);
                     std::shuffle(all.begin(), all.end(), std::mt19937(11));
                     std::vector<int32_t> slots(static_cast<size_t>(N));
                     for (int64_t i = 0; i < N; ++i) slots[size_t(i)] = i % 4 == 1 ? -1 : all[size_t(i)];
                     auto kc = bf16_exact(size_t(slots_total * Hkv * D), 12), vc = bf16_exact(kc.size(), 13);
                     auto k = bf16_exact(size_t(N * Hkv * D), 14), v = bf16_exact(k.size(), 15);
                     Tensor dkc = h.guarded_from(kc, {NB, BS, Hkv, D}, DType::bf16);
                     Tensor dvc = h.guarded_from(vc, {NB, BS, Hkv, D}, DType::bf16);
                     ops::kv_cache_write(h.gpu(), dkc, dvc, h.upload(k, {N, Hkv, D}, DType::bf16),
                                         h.upload(v, {N, Hkv, D}, DType::bf16), h.upload_raw(slots, {N}));
                     ops::kv_cache_write(h.cpu(), host(kc, {NB, BS, Hkv, D}), host(vc, {NB, BS, Hkv, D}),
                                         host(k, {N, Hkv, D}), host(v, {N, Hkv, D}), host_t(slots, {N}));
                     h.same("k_cache", h.download(dkc), kc);
                     h.same("v_cache", h.download(dvc), vc);
                   }});
}

// Five block copies (one source twice), D = 128 (16-byte copies) and 5; then
// a call with no blocks.
void add_kv_block_copy(Cases& cases, int64_t D) {
  cases.push_back(
      {case_name({"kv_block_copy", "bf16", dims({12, 16, 2, D})}),
       {"kv_block_copy"},
       "",
       {{"k_cache", 0, 0, "blocks copied: exact"}, {"v_cache", 0, 0, "blocks copied: exact"}},
       [=](Harness& h) {
         const int64_t NB = 12, BS = 16, Hkv = 2;
         auto kc = bf16_exact(size_t(NB * BS * Hkv * D), 21), vc = bf16_exact(kc.size(), 22);
         std::vector<int32_t> src{3, 0, 7, 3, 11}, dst{1, 5, 2, 9, 4};
         Tensor dkc = h.guarded_from(kc, {NB, BS, Hkv, D}, DType::bf16);
         Tensor dvc = h.guarded_from(vc, {NB, BS, Hkv, D}, DType::bf16);
         ops::kv_block_copy(h.gpu(), dkc, dvc, h.upload_raw(src, {5}), h.upload_raw(dst, {5}));
         ops::kv_block_copy(h.gpu(), dkc, dvc, Tensor(nullptr, DType::i32, {0}, Device::cuda),
                            Tensor(nullptr, DType::i32, {0}, Device::cuda));
         ops::kv_block_copy(h.cpu(), host(kc, {NB, BS, Hkv, D}), host(vc, {NB, BS, Hkv, D}), host_t(src, {5}),
                            host_t(dst, {5}));
         h.same("k_cache", h.download(dkc), kc);
         h.same("v_cache", h.download(dvc), vc);
       }});
}

// ---- step I/O ----

// Word counts around the 4-word vectors and the 1,024-word CTAs; the tokens
// at a 16-byte boundary inside the mirror, 33 of them fed.
void add_step_io(Cases& cases, int64_t n) {
  cases.push_back(
      {case_name({"step_in_step_out", "i32", "n" + std::to_string(n)}),
       {"step_in", "step_out"},
       "",
       {{"device", 0, 0, "words copied: exact"}, {"host", 0, 0, "words copied: exact"}},
       [=](Harness& h) {
         std::vector<int32_t> words(static_cast<size_t>(n)), fed(64);
         std::iota(words.begin(), words.end(), 100);
         std::iota(fed.begin(), fed.end(), -500);
         const int64_t tokens0 = n >= 8 ? 4 : 0, N = std::min<int64_t>(n - tokens0, 40);
         const int64_t fed_count = std::min<int64_t>(N, 33);
         // CPU: the op on host buffers.
         std::vector<int32_t> cpu_dev(size_t(n), -1), cpu_back(size_t(n), 0);
         ops::step_in(h.cpu(), {host_t(words, {n}), host_t(cpu_dev, {n}), Tensor(cpu_dev.data() + tokens0, DType::i32, {N}),
                                host_t(fed, {64}), fed_count, n});
         ops::step_out(h.cpu(), {host_t(cpu_back, {n}), host_t(cpu_dev, {n}), n});
         // GPU: pinned host words, a device mirror starting at -1.
         int32_t* hw = h.pinned().alloc_array<int32_t>(static_cast<size_t>(n));
         std::memcpy(hw, words.data(), words.size() * 4);
         const Tensor dev = h.guarded(DType::i32, {n}), fed_dev = h.upload_raw(fed, {64});
         std::vector<int32_t> minus(size_t(n), -1);
         h.put_raw(dev, minus);
         const Tensor tokens(static_cast<int32_t*>(dev.data) + tokens0, DType::i32, {N}, Device::cuda);
         ops::step_in(h.gpu(), {Tensor(hw, DType::i32, {n}), dev, tokens, fed_dev, fed_count, n + 5});
         h.same("device", h.download_raw<int32_t>(dev), cpu_dev);
         int32_t* back = h.pinned().alloc_array<int32_t>(static_cast<size_t>(n));
         std::memset(back, 0, size_t(n) * 4);
         ops::step_out(h.gpu(), {Tensor(back, DType::i32, {n}), dev, n});
         ops::stream_synchronize(h.gpu());
         h.same("host", std::vector<int32_t>(back, back + n), cpu_back);
       }});
}

}  // namespace

void add_elementwise_cases(Cases& cases) {
  for (const DType dt : {DType::f32, DType::bf16}) {
    struct S {
      int64_t N, I, shift;
    };
    for (const S s : {S{37, 1000, 0}, S{37, 1001, 0}, S{1, 5, 0}, S{37, 1000, 1}, S{0, 64, 0}})
      add_swiglu(cases, s.N, s.I, s.shift, dt);
  }
  for (const DType dt : {DType::f32, DType::bf16}) {
    for (const shapes::THD s : shapes::rope_shapes()) add_rope(cases, s.T, s.H, s.D, dt);
  }
  for (const shapes::RopeKvRun& r : shapes::rope_kv_write_runs()) add_rope_kv_write(cases, r);
  for (const shapes::RopeKvRun& r : shapes::rope_kv_write_head_norm_runs()) add_rope_kv_write(cases, r, true);
  for (const int64_t N : {int64_t(1000003), int64_t(4096), int64_t(7), int64_t(0)})
    for (const int64_t offset : {0, 1}) add_adamw(cases, N, offset);
  for (const int64_t N : {int64_t(0), int64_t(1), int64_t(3), int64_t(1000), int64_t(65537), int64_t(20000003)})
    add_sum_squares(cases, N);
  for (const int64_t N : {int64_t(1), int64_t(7), int64_t(8), int64_t(1003), int64_t((1 << 20) + 5)})
    for (const int64_t offset : {0, 1}) add_cast(cases, N, offset);
  add_fill(cases, DType::f32, {0.0, 1.5, -0.0, 0.1});
  add_fill(cases, DType::bf16, {0.0, 0.1, -2.0});
  add_fill(cases, DType::i32, {-1.0, 7.0});
  add_fill(cases, DType::i64, {0.0, 1099511627779.0, -3.0});
  for (const DType dt : {DType::f32, DType::bf16, DType::i32})
    for (const int64_t n : {0, 1, 1003}) add_copy(cases, dt, n);
  for (const DType dt : {DType::f32, DType::bf16})
    for (const shapes::EmbeddingRun& r : shapes::embedding_runs())
      add_embedding(cases, r.tag, r.ids, r.V, r.C, r.vocab_start, r.seed, dt);
  add_kv_cache_write(cases, 20, 16, 2, 128, 37);
  add_kv_cache_write(cases, 5, 3, 1, 12, 9);
  add_kv_cache_write(cases, 4, 16, 2, 64, 0);
  add_kv_block_copy(cases, 128);
  add_kv_block_copy(cases, 5);
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(1024), int64_t(1029), int64_t(9001)}) add_step_io(cases, n);
}

}  // namespace dapo::test::backend_ops
