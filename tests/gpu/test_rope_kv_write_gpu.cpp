// The fused decode-step RoPE + KV cache write on the GPU: the same bits as
// cuda::rope_forward on q, on k, then cuda::kv_cache_write (q, k, both caches,
// v untouched) at the Qwen2.5 0.5B / 1.5B / 7B head shapes, decode batches
// of 0..1000 tokens and a 4096-token prefill (16-byte packs), positions up
// to 32k, slots spread over a shuffled pool with some -1; an odd half and a
// misaligned q (the narrow paths); against the CPU op within rope's bf16
// bound; and the perf case, fused vs the three ops.
#include "dapo/ops/rope_kv_write.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "dapo/ops/kv_cache.h"
#include "dapo/ops/rope.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

struct Heads {
  int64_t Hq, Hkv, D;
};
constexpr Heads kQwen05{14, 2, 64}, kQwen15{12, 2, 128}, kQwen7{28, 4, 128};

class RopeKvWriteGpu : public GpuTest {
 protected:
  // A guarded bf16 device tensor holding `host` (guards catch stray writes
  // of an in-place op). shift_elems > 0 places it that many elements past an
  // aligned start.
  Tensor guarded_copy(const std::vector<float>& host, std::initializer_list<int64_t> dims, int64_t shift_elems = 0) {
    const int64_t n = int64_t(host.size());
    Tensor flat = guarded(DType::bf16, {n + shift_elems});
    Tensor t(static_cast<bf16*>(flat.data) + shift_elems, DType::bf16, dims, Device::cuda);
    std::vector<bf16> b(host.size());
    for (size_t i = 0; i < host.size(); ++i) b[i] = to_bf16(host[i]);
    device_->copy_to_device(t, Tensor(b.data(), DType::bf16, dims));
    return t;
  }

  void run_case(int64_t T, Heads h, uint32_t seed, int64_t q_shift = 0) {
    const int64_t Hq = h.Hq, Hkv = h.Hkv, D = h.D, BS = 16;
    const int64_t NB = (2 * T + 40) / BS + 1;  // a pool about twice the batch
    SCOPED_TRACE(testing::Message() << "T " << T << " Hq " << Hq << " Hkv " << Hkv << " D " << D << " q shift "
                                    << q_shift);
    std::mt19937 gen(seed);
    std::vector<int32_t> pos(static_cast<size_t>(T)), all(static_cast<size_t>(NB * BS)), slots(pos.size());
    for (auto& p : pos) p = int32_t(gen() % 32768);
    if (T > 1) pos[0] = 0, pos[1] = 32767;
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    for (int64_t i = 0; i < T; ++i) slots[size_t(i)] = i % 7 == 2 ? -1 : all[size_t(i)];
    auto q = random_bf16_exact(size_t(T * Hq * D), seed + 1, -2, 2);
    auto k = random_bf16_exact(size_t(T * Hkv * D), seed + 2, -2, 2);
    auto v = random_bf16_exact(k.size(), seed + 3, -2, 2);
    auto kc = random_bf16_exact(size_t(NB * BS * Hkv * D), seed + 4), vc = random_bf16_exact(kc.size(), seed + 5);
    const std::initializer_list<int64_t> qd{T, Hq, D}, kd{T, Hkv, D}, cd{NB, BS, Hkv, D};
    Tensor gpos = upload_raw(pos, {T}), gslots = upload_raw(slots, {T});

    // The three ops.
    Tensor q1 = upload(q, qd, DType::bf16), k1 = upload(k, kd, DType::bf16), v1 = upload(v, kd, DType::bf16);
    Tensor kc1 = upload(kc, cd, DType::bf16), vc1 = upload(vc, cd, DType::bf16);
    ops::rope_forward(gpu(), q1, q1, gpos, ops::kRopeThetaQwen2);
    ops::rope_forward(gpu(), k1, k1, gpos, ops::kRopeThetaQwen2);
    ops::kv_cache_write(gpu(), kc1, vc1, k1, v1, gslots);

    // The fused op.
    Tensor q2 = guarded_copy(q, qd, q_shift), k2 = guarded_copy(k, kd), v2 = guarded_copy(v, kd);
    Tensor kc2 = guarded_copy(kc, cd), vc2 = guarded_copy(vc, cd);
    ops::rope_kv_write(gpu(), q2, k2, kc2, vc2, v2, gpos, gslots, ops::kRopeThetaQwen2);

    const auto q_g = download(q2), k_g = download(k2), kc_g = download(kc2), vc_g = download(vc2);
    EXPECT_TRUE(same_bits(q_g, download(q1))) << "q";
    EXPECT_TRUE(same_bits(k_g, download(k1))) << "k";
    EXPECT_TRUE(same_bits(kc_g, download(kc1))) << "k_cache";
    EXPECT_TRUE(same_bits(vc_g, download(vc1))) << "v_cache";
    EXPECT_TRUE(same_bits(download(v2), v)) << "v changed";

    // The CPU op, on the same (bf16-exact) values: rope's bf16 bound.
    ops::rope_kv_write(cpu(), tensor_f32(q.data(), qd), tensor_f32(k.data(), kd), tensor_f32(kc.data(), cd),
                       tensor_f32(vc.data(), cd), tensor_f32(v.data(), kd), tensor_i32(pos.data(), {T}),
                       tensor_i32(slots.data(), {T}), ops::kRopeThetaQwen2);
    const double tol = 8e-3;
    expect_close(q_g, q, tol, tol, "q");
    expect_close(k_g, k, tol, tol, "k");
    expect_close(kc_g, kc, tol, tol, "k_cache");
    EXPECT_TRUE(same_bits(vc_g, vc)) << "v_cache vs cpu";
    check_guards();
  }
};

TEST_F(RopeKvWriteGpu, EqualsTheThreeOps) {
  uint32_t seed = 100;
  for (const Heads h : {kQwen05, kQwen15, kQwen7})
    for (int64_t T : {0, 1, 5, 128, 256, 1000}) run_case(T, h, seed += 10);
  run_case(4096, kQwen15, seed += 10);        // prefill-sized: 16-byte packs
  run_case(33, Heads{3, 1, 6}, seed += 10);   // odd half: one pair per thread
  run_case(57, kQwen05, seed += 10, 1);       // q 2-byte aligned: one pair per thread
  run_case(4096, kQwen15, seed += 10, 2);     // q 4-byte aligned: pairs of two where 16-byte packs would go
}

// us per call of the fused op and of the three ops it replaces, at decode
// batches: back to back on the stream (launch overhead included, as an
// eager decode step), and replayed from a CUDA graph of the same calls (the
// GPU time alone, as the engine's captured step).
TEST_F(RopeKvWriteGpu, Perf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  Arena big(size_t(1) << 30, Device::cuda, "perf");
  constexpr int kCalls = 200;
  for (const Heads h : {kQwen05, kQwen15})
    for (int64_t B : {32, 128, 256}) {
      ArenaScope scope(big);
      const int64_t BS = 16, NB = 4096;  // a pool of 64k slots
      std::mt19937 gen(static_cast<unsigned>(B));
      std::vector<int32_t> pos(static_cast<size_t>(B)), all(static_cast<size_t>(NB * BS)), slots(pos.size());
      for (auto& p : pos) p = int32_t(gen() % 4096);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), gen);
      std::copy_n(all.begin(), B, slots.begin());
      Tensor gpos = upload_raw(pos, {B}), gslots = upload_raw(slots, {B});
      Tensor q = big.alloc(DType::bf16, {B, h.Hq, h.D}), k = big.alloc(DType::bf16, {B, h.Hkv, h.D});
      Tensor v = big.alloc(DType::bf16, {B, h.Hkv, h.D});
      Tensor kc = big.alloc(DType::bf16, {NB, BS, h.Hkv, h.D}), vc = big.alloc(DType::bf16, {NB, BS, h.Hkv, h.D});
      fill_random(*device_, q, 1);
      fill_random(*device_, k, 2);
      fill_random(*device_, v, 3);
      const auto fused = [&] { ops::rope_kv_write(ctx, q, k, kc, vc, v, gpos, gslots, ops::kRopeThetaQwen2); };
      const auto three = [&] {
        ops::rope_forward(ctx, q, q, gpos, ops::kRopeThetaQwen2);
        ops::rope_forward(ctx, k, k, gpos, ops::kRopeThetaQwen2);
        ops::kv_cache_write(ctx, kc, vc, k, v, gslots);
      };
      const auto graph_us = [&](const std::function<void()>& f) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        for (int i = 0; i < kCalls; ++i) f();
        EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
        EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        const double ms = time_ms(ctx.stream, [&] { EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess); }, 5, 2);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        return ms * 1e3 / kCalls;
      };
      const double fused_us = time_ms(ctx.stream, fused, kCalls, 20) * 1e3;
      const double three_us = time_ms(ctx.stream, three, kCalls, 20) * 1e3;
      const double fused_graph_us = graph_us(fused), three_graph_us = graph_us(three);
      std::printf(
          "{\"op\":\"rope_kv_write\",\"shape\":\"B=%lld,Hq=%lld,Hkv=%lld,D=%lld\",\"fused_us\":%.2f,"
          "\"three_ops_us\":%.2f,\"fused_graph_us\":%.2f,\"three_ops_graph_us\":%.2f}\n",
          (long long)B, (long long)h.Hq, (long long)h.Hkv, (long long)h.D, fused_us, three_us, fused_graph_us,
          three_graph_us);
      std::fflush(stdout);
    }
}

}  // namespace
}  // namespace dapo::test
