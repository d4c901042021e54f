// Causal GQA attention over packed sequences on the GPU (bf16, tensor cores)
// against the CPU reference (fp32) on bf16-exact inputs: MHA and GQA groups
// 2, 6, 7, head dims 16, 32, 64 and 128, packed batches with empty and one-token
// sequences and lengths off the tile sizes, an empty batch, one long
// sequence; bit-identical backward on repeated runs. DAPO_GPU_PERF=1 adds
// the timing of the model shapes.
#include "dapo/ops/attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

struct Shape {
  std::vector<int> lens;
  int64_t Hq, Hkv, D;
};

std::string describe(const Shape& s) {
  std::string out = "lens {";
  for (size_t i = 0; i < s.lens.size(); ++i) out += (i ? "," : "") + std::to_string(s.lens[i]);
  return out + "} Hq " + std::to_string(s.Hq) + " Hkv " + std::to_string(s.Hkv) + " D " + std::to_string(s.D);
}

// |got - want| <= frac * max|want| + rtol * |want| elementwise (bf16 outputs
// and bf16-rounded P and dS: errors scale with the tensor, not the element),
// and a relative L2 error under l2; every element finite.
void expect_close_scaled(const std::vector<float>& got, const std::vector<float>& want, double frac, double rtol,
                         double l2, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double maxabs = 0, num = 0, den = 0;
  for (float w : want) maxabs = std::max(maxabs, double(std::fabs(w)));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * want[i];
    if (!(std::fabs(d) <= frac * maxabs + rtol * std::fabs(want[i])) && bad++ < 8)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << " cpu " << want[i] << " (max |cpu| " << maxabs << ")";
  }
  if (den > 0) EXPECT_LE(std::sqrt(num / den), l2) << what << ": relative L2 error";
}

class AttentionGpu : public GpuTest {
 protected:
  struct Inputs {
    int64_t T = 0;
    std::vector<int32_t> cu;
    std::vector<float> q, k, v, dout;
  };

  static Inputs make_inputs(const Shape& s, uint32_t seed) {
    Inputs in;
    in.cu = {0};
    for (int len : s.lens) in.cu.push_back(in.cu.back() + len);
    in.T = in.cu.back();
    // |q|, |k| up to 1.5: scores spread enough that softmax rows are far from uniform.
    in.q = random_bf16_exact(size_t(in.T * s.Hq * s.D), seed, -1.5f, 1.5f);
    in.k = random_bf16_exact(size_t(in.T * s.Hkv * s.D), seed + 1, -1.5f, 1.5f);
    in.v = random_bf16_exact(size_t(in.T * s.Hkv * s.D), seed + 2);
    in.dout = random_bf16_exact(size_t(in.T * s.Hq * s.D), seed + 3);
    return in;
  }

  void check_shape(const Shape& s, uint32_t seed) {
    SCOPED_TRACE(describe(s));
    Inputs in = make_inputs(s, seed);
    const int64_t T = in.T, Hq = s.Hq, Hkv = s.Hkv, D = s.D, B = int64_t(s.lens.size());
    const int64_t max_len = s.lens.empty() ? 0 : *std::max_element(s.lens.begin(), s.lens.end());
    const float scale = 1.0f / std::sqrt(float(D));

    // CPU reference in fp32 on the same (bf16-exact) values.
    std::vector<float> out(T * Hq * D), lse(Hq * T), dq(T * Hq * D), dk(T * Hkv * D), dv(T * Hkv * D);
    auto h3 = [](std::vector<float>& x, int64_t a, int64_t b, int64_t c) { return tensor_f32(x.data(), {a, b, c}); };
    Tensor hcu = tensor_i32(in.cu.data(), {B + 1});
    ops::attention_forward(cpu(), h3(out, T, Hq, D), tensor_f32(lse.data(), {Hq, T}), h3(in.q, T, Hq, D),
                           h3(in.k, T, Hkv, D), h3(in.v, T, Hkv, D), hcu, max_len, scale);
    ops::attention_backward(cpu(), h3(dq, T, Hq, D), h3(dk, T, Hkv, D), h3(dv, T, Hkv, D), h3(in.dout, T, Hq, D),
                            h3(in.q, T, Hq, D), h3(in.k, T, Hkv, D), h3(in.v, T, Hkv, D), h3(out, T, Hq, D),
                            tensor_f32(lse.data(), {Hq, T}), hcu, max_len, scale);

    Tensor q = upload(in.q, {T, Hq, D}, DType::bf16), k = upload(in.k, {T, Hkv, D}, DType::bf16);
    Tensor v = upload(in.v, {T, Hkv, D}, DType::bf16), dout = upload(in.dout, {T, Hq, D}, DType::bf16);
    Tensor cu = upload_raw(in.cu, {B + 1});
    Tensor g_out = guarded(DType::bf16, {T, Hq, D}), g_lse = guarded(DType::f32, {Hq, T});
    ops::attention_forward(gpu(), g_out, g_lse, q, k, v, cu, max_len, scale);
    Tensor g_dq = guarded(DType::bf16, {T, Hq, D}), g_dk = guarded(DType::bf16, {T, Hkv, D}),
           g_dv = guarded(DType::bf16, {T, Hkv, D});
    ops::attention_backward(gpu(), g_dq, g_dk, g_dv, dout, q, k, v, g_out, g_lse, cu, max_len, scale);
    device_->synchronize();

    expect_close_scaled(download(g_out), out, 5e-3, 2e-2, 1e-2, "out");
    expect_close(download(g_lse), lse, 1e-3, 0, "lse");
    expect_close_scaled(download(g_dq), dq, 1e-2, 3e-2, 2e-2, "dq");
    expect_close_scaled(download(g_dk), dk, 1e-2, 3e-2, 2e-2, "dk");
    expect_close_scaled(download(g_dv), dv, 1e-2, 3e-2, 2e-2, "dv");

    // Same inputs, same bits: the backward feeds the optimizer.
    Tensor g_dq2 = guarded(DType::bf16, {T, Hq, D}), g_dk2 = guarded(DType::bf16, {T, Hkv, D}),
           g_dv2 = guarded(DType::bf16, {T, Hkv, D});
    ops::attention_backward(gpu(), g_dq2, g_dk2, g_dv2, dout, q, k, v, g_out, g_lse, cu, max_len, scale);
    device_->synchronize();
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same_bits(download(g_dq), download(g_dq2))) << "dq differs between two runs";
    EXPECT_TRUE(same_bits(download(g_dk), download(g_dk2))) << "dk differs between two runs";
    EXPECT_TRUE(same_bits(download(g_dv), download(g_dv2))) << "dv differs between two runs";
    check_guards();
  }
};

TEST_F(AttentionGpu, MhaMatchesCpu) {
  check_shape({{1, 17, 0, 130, 64, 200}, 4, 4, 64}, 11);
  check_shape({{129, 1, 66}, 3, 3, 128}, 12);
}

TEST_F(AttentionGpu, GqaMatchesCpu) {
  check_shape({{100, 1, 257}, 4, 2, 128}, 21);           // group 2
  check_shape({{300, 0, 45, 128}, 12, 2, 128}, 22);      // group 6: Qwen2.5-1.5B
  check_shape({{129, 200, 1, 1, 0}, 14, 2, 64}, 23);     // group 7: Qwen2.5-0.5B
  check_shape({{77, 190}, 28, 4, 128}, 24);              // group 7: Qwen2.5-7B
  check_shape({{513, 31}, 7, 1, 64}, 25);                // 0.5B at tp = 2
  check_shape({{0, 255, 0}, 6, 1, 128}, 26);             // 1.5B at tp = 2, empty sequences around
  // Many short sequences (the device work table orders 40 of them).
  check_shape({{5, 90, 0, 33, 64, 65, 1, 2, 77, 12, 40, 0, 3, 88, 63, 17, 9, 50, 71, 6,
                26, 64, 0, 128, 31, 7, 45, 80, 2, 19, 55, 66, 11, 4, 99, 36, 48, 21, 0, 70}, 4, 2, 64},
              27);
}

// More sequences than the work table's kernel stages in shared memory
// (4,096): it then reads their lengths from global memory.
TEST_F(AttentionGpu, ManySequencesMatchCpu) {
  std::vector<int> lens(4500);
  for (size_t i = 0; i < lens.size(); ++i) lens[i] = int(i % 7 == 3 ? 70 : 1 + i % 3);
  check_shape({lens, 4, 2, 64}, 51);
}

TEST_F(AttentionGpu, LongSequenceMatchesCpu) {
  check_shape({{4096}, 12, 2, 128}, 31);
  check_shape({{2500, 1596}, 14, 2, 64}, 32);
}

// The small models' head dims: the demo model (hidden 128, 4 / 2 heads:
// D = 32) and the tiny_untied fixture (hidden 64, 4 / 2 heads: D = 16).
TEST_F(AttentionGpu, SmallHeadDimsMatchCpu) {
  for (int64_t D : {32, 16}) {
    check_shape({{1, 17, 0, 130, 64, 200}, 4, 2, D}, 41);  // group 2, empty and one-token sequences
    check_shape({{129, 1, 66, 0, 255, 31}, 4, 2, D}, 42);
    check_shape({{600}, 4, 2, D}, 43);                     // one sequence past several key blocks
    check_shape({{33, 190, 5}, 4, 4, D}, 44);              // MHA
  }
}

TEST_F(AttentionGpu, EmptyBatchIsANoOp) {
  for (const std::vector<int32_t>& cu_host : {std::vector<int32_t>{0}, std::vector<int32_t>{0, 0, 0}}) {
    Tensor q = device_empty(DType::bf16, {0, 4, 64}), k = device_empty(DType::bf16, {0, 2, 64});
    Tensor v = device_empty(DType::bf16, {0, 2, 64}), dout = device_empty(DType::bf16, {0, 4, 64});
    Tensor cu = upload_raw(cu_host, {int64_t(cu_host.size())});
    Tensor out = guarded(DType::bf16, {0, 4, 64}), lse = guarded(DType::f32, {4, 0});
    Tensor dq = guarded(DType::bf16, {0, 4, 64}), dk = guarded(DType::bf16, {0, 2, 64}),
           dv = guarded(DType::bf16, {0, 2, 64});
    ops::attention_forward(gpu(), out, lse, q, k, v, cu, 0, 0.125f);
    ops::attention_backward(gpu(), dq, dk, dv, dout, q, k, v, out, lse, cu, 0, 0.125f);
  }
  check_guards();
}

// Forward and backward TFLOP/s on the model shapes, causal FLOPs counted as
// 4 L^2 / 2 D Hq per sequence forward and 2.5 times that backward.
TEST_F(AttentionGpu, Perf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  struct PerfShape {
    const char* model;
    int64_t Hq, Hkv, D;
    std::vector<int> lens;
  };
  const std::vector<PerfShape> shapes = {{"1.5B", 12, 2, 128, {4096, 4096, 4096, 4096}},
                                         {"1.5B", 12, 2, 128, {16384}},
                                         {"0.5B", 14, 2, 64, {4096, 4096, 4096, 4096}},
                                         {"0.5B", 14, 2, 64, {16384}},
                                         {"0.5B", 14, 2, 64, std::vector<int>(128, 256)},
                                         {"1.5B", 12, 2, 128, std::vector<int>(128, 256)}};
  const cudaStream_t stream = static_cast<cudaStream_t>(gpu().stream);
  for (const PerfShape& ps : shapes) {
    ArenaScope scope(*arena_);  // each shape's tensors go back before the next
    const Shape s{ps.lens, ps.Hq, ps.Hkv, ps.D};
    Inputs in = make_inputs(s, 7);
    const int64_t T = in.T, Hq = s.Hq, Hkv = s.Hkv, D = s.D, B = int64_t(s.lens.size());
    const float scale = 1.0f / std::sqrt(float(D));
    Tensor q = upload(in.q, {T, Hq, D}, DType::bf16), k = upload(in.k, {T, Hkv, D}, DType::bf16);
    Tensor v = upload(in.v, {T, Hkv, D}, DType::bf16), dout = upload(in.dout, {T, Hq, D}, DType::bf16);
    Tensor cu = upload_raw(in.cu, {B + 1});
    Tensor out = device_empty(DType::bf16, {T, Hq, D}), lse = device_empty(DType::f32, {Hq, T});
    Tensor dq = device_empty(DType::bf16, {T, Hq, D}), dk = device_empty(DType::bf16, {T, Hkv, D}),
           dv = device_empty(DType::bf16, {T, Hkv, D});
    const int64_t max_len = *std::max_element(s.lens.begin(), s.lens.end());
    double fwd_flops = 0;
    for (int len : s.lens) fwd_flops += 4.0 * double(len) * double(len) / 2.0 * double(D) * double(Hq);

    auto time_ms = [&](auto&& fn) { return median_ms(stream, fn); };
    const std::string shape = std::string(ps.model) + " " + std::to_string(B) + "x" + std::to_string(s.lens[0]) +
                              " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D);
    const double f_ms = time_ms([&] { ops::attention_forward(gpu(), out, lse, q, k, v, cu, max_len, scale); });
    const double b_ms = time_ms(
        [&] { ops::attention_backward(gpu(), dq, dk, dv, dout, q, k, v, out, lse, cu, max_len, scale); });
    std::printf("{\"op\":\"attention_forward\",\"shape\":\"%s\",\"ms\":%.4f,\"tflops\":%.1f}\n", shape.c_str(), f_ms,
                fwd_flops / (f_ms * 1e-3) / 1e12);
    std::printf("{\"op\":\"attention_backward\",\"shape\":\"%s\",\"ms\":%.4f,\"tflops\":%.1f}\n", shape.c_str(), b_ms,
                2.5 * fwd_flops / (b_ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace dapo::test
