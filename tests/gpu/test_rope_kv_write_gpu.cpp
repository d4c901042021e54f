// The fused decode-step RoPE + KV cache write on the GPU beyond the
// comparison with the CPU (test_backend_ops_elementwise.cpp): the same bits
// as cuda::rope_forward on q, on k, then cuda::kv_cache_write (q, k, both
// caches; v untouched), at the harness's runs: the Qwen2.5 0.5B / 1.5B / 7B
// head shapes, decode batches of 0..1000 tokens and a 4096-token prefill,
// positions up to 32k, slots over a shuffled pool with some -1, an odd half
// and a misaligned q (the narrow paths). With Qwen3's head norm: the same
// bits as cuda::rmsnorm_forward on the head rows of q and k, then the op
// without the norm, on both of its paths (op_shapes.h's head-norm runs).

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cuda/cuda_ops.h"
#include "dapo/ops/kv_cache.h"
#include "dapo/ops/rmsnorm.h"
#include "dapo/ops/rope.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

class RopeKvWriteGpu : public GpuTest {
 protected:
  // A guarded bf16 device tensor holding `host` (guards catch stray writes
  // of an in-place op), shift_elems past an aligned start.
  Tensor guarded_copy(const std::vector<float>& host, std::initializer_list<int64_t> dims, int64_t shift_elems = 0) {
    const int64_t n = int64_t(host.size());
    Tensor flat = guarded(DType::bf16, {n + shift_elems});
    Tensor t(static_cast<bf16*>(flat.data) + shift_elems, DType::bf16, dims, Device::cuda);
    std::vector<bf16> b(host.size());
    for (size_t i = 0; i < host.size(); ++i) b[i] = to_bf16(host[i]);
    device_->copy_to_device(t, Tensor(b.data(), DType::bf16, dims));
    return t;
  }
};

TEST_F(RopeKvWriteGpu, EqualsTheThreeOps) {
  for (const shapes::RopeKvRun& r : shapes::rope_kv_write_runs()) {
    const int64_t T = r.T, Hq = r.heads.Hq, Hkv = r.heads.Hkv, D = r.heads.D, BS = 16;
    const int64_t NB = (2 * T + 40) / BS + 1;  // a pool about twice the batch
    SCOPED_TRACE(testing::Message() << "T " << T << " Hq " << Hq << " Hkv " << Hkv << " D " << D << " q shift "
                                    << r.q_shift);
    const size_t mark = arena_->mark();
    std::mt19937 gen(r.seed);
    std::vector<int32_t> pos(static_cast<size_t>(T)), all(static_cast<size_t>(NB * BS)), slots(pos.size());
    for (auto& p : pos) p = int32_t(gen() % 32768);
    if (T > 1) pos[0] = 0, pos[1] = 32767;
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    for (int64_t i = 0; i < T; ++i) slots[size_t(i)] = i % 7 == 2 ? -1 : all[size_t(i)];
    const auto q = random_bf16_exact(size_t(T * Hq * D), r.seed + 1, -2, 2);
    const auto k = random_bf16_exact(size_t(T * Hkv * D), r.seed + 2, -2, 2);
    const auto v = random_bf16_exact(k.size(), r.seed + 3, -2, 2);
    const auto kc = random_bf16_exact(size_t(NB * BS * Hkv * D), r.seed + 4), vc = random_bf16_exact(kc.size(), r.seed + 5);
    const std::initializer_list<int64_t> qd{T, Hq, D}, kd{T, Hkv, D}, cd{NB, BS, Hkv, D};
    Tensor gpos = upload_raw(pos, {T}), gslots = upload_raw(slots, {T});

    // The three ops.
    Tensor q1 = upload(q, qd, DType::bf16), k1 = upload(k, kd, DType::bf16), v1 = upload(v, kd, DType::bf16);
    Tensor kc1 = upload(kc, cd, DType::bf16), vc1 = upload(vc, cd, DType::bf16);
    ops::rope_forward(gpu(), q1, q1, gpos, ops::kRopeThetaQwen2);
    ops::rope_forward(gpu(), k1, k1, gpos, ops::kRopeThetaQwen2);
    ops::kv_cache_write(gpu(), kc1, vc1, k1, v1, gslots);

    // The fused op.
    Tensor q2 = guarded_copy(q, qd, r.q_shift), k2 = guarded_copy(k, kd), v2 = guarded_copy(v, kd);
    Tensor kc2 = guarded_copy(kc, cd), vc2 = guarded_copy(vc, cd);
    ops::rope_kv_write(gpu(), q2, k2, kc2, vc2, v2, gpos, gslots, ops::kRopeThetaQwen2);

    EXPECT_TRUE(bits(q2) == bits(q1)) << "q";
    EXPECT_TRUE(bits(k2) == bits(k1)) << "k";
    EXPECT_TRUE(bits(kc2) == bits(kc1)) << "k_cache";
    EXPECT_TRUE(bits(vc2) == bits(vc1)) << "v_cache";
    EXPECT_EQ(download(v2), v) << "v changed";
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
}

// The reference norms q and k out of place (rmsnorm_forward's contract),
// from and into copies as (mis)aligned as the op's q, so that the norm
// takes the same path (16-byte packs or elements) as the op's fallback.
TEST_F(RopeKvWriteGpu, HeadNormEqualsRmsnormThenRopeKvWrite) {
  int fused_runs = 0;
  for (const shapes::RopeKvRun& r : shapes::rope_kv_write_head_norm_runs()) {
    const int64_t T = r.T, Hq = r.heads.Hq, Hkv = r.heads.Hkv, D = r.heads.D, BS = 16;
    const int64_t NB = (2 * T + 40) / BS + 1;
    SCOPED_TRACE(testing::Message() << "T " << T << " Hq " << Hq << " Hkv " << Hkv << " D " << D << " q shift "
                                    << r.q_shift);
    const size_t mark = arena_->mark();
    std::mt19937 gen(r.seed);
    std::vector<int32_t> pos(static_cast<size_t>(T)), all(static_cast<size_t>(NB * BS)), slots(pos.size());
    for (auto& p : pos) p = int32_t(gen() % 32768);
    if (T > 1) pos[0] = 0, pos[1] = 32767;
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    for (int64_t i = 0; i < T; ++i) slots[size_t(i)] = i % 7 == 2 ? -1 : all[size_t(i)];
    const auto q = random_bf16_exact(size_t(T * Hq * D), r.seed + 1, -2, 2);
    const auto k = random_bf16_exact(size_t(T * Hkv * D), r.seed + 2, -2, 2);
    const auto v = random_bf16_exact(k.size(), r.seed + 3, -2, 2);
    const auto kc = random_bf16_exact(size_t(NB * BS * Hkv * D), r.seed + 4), vc = random_bf16_exact(kc.size(), r.seed + 5);
    const auto wq = random_bf16_exact(size_t(D), r.seed + 6, 0.5f, 1.5f), wk = random_bf16_exact(size_t(D), r.seed + 7);
    const float eps = 1e-6f;
    const std::initializer_list<int64_t> qd{T, Hq, D}, kd{T, Hkv, D}, cd{NB, BS, Hkv, D};
    Tensor gpos = upload_raw(pos, {T}), gslots = upload_raw(slots, {T});
    const ops::HeadNorm hn{upload(wq, {D}, DType::bf16), upload(wk, {D}, DType::bf16), eps};

    // rmsnorm_forward on the head rows, then the op without the norm.
    Tensor q0 = guarded_copy(q, qd, r.q_shift), k0 = guarded_copy(k, kd);
    Tensor q1 = guarded_copy(q, qd, r.q_shift), k1 = guarded_copy(k, kd), v1 = guarded_copy(v, kd);
    Tensor kc1 = guarded_copy(kc, cd), vc1 = guarded_copy(vc, cd);
    ops::rmsnorm_forward(gpu(), q1.reshape({T * Hq, D}), device_empty(DType::f32, {T * Hq}), q0.reshape({T * Hq, D}),
                         hn.q_weight, eps);
    ops::rmsnorm_forward(gpu(), k1.reshape({T * Hkv, D}), device_empty(DType::f32, {T * Hkv}),
                         k0.reshape({T * Hkv, D}), hn.k_weight, eps);
    ops::rope_kv_write(gpu(), q1, k1, kc1, vc1, v1, gpos, gslots, ops::kRopeThetaQwen2);

    // The op with the norm.
    Tensor q2 = guarded_copy(q, qd, r.q_shift), k2 = guarded_copy(k, kd), v2 = guarded_copy(v, kd);
    Tensor kc2 = guarded_copy(kc, cd), vc2 = guarded_copy(vc, cd);
    const bool fused = ops::cuda::detail::rope_kv_write_head_norm_fused(q2, k2, kc2, vc2, v2, hn);
    EXPECT_EQ(fused, shapes::head_norm_fused(r));
    fused_runs += fused;
    ops::rope_kv_write(gpu(), q2, k2, kc2, vc2, v2, gpos, gslots, ops::kRopeThetaQwen2, hn);

    EXPECT_TRUE(bits(q2) == bits(q1)) << "q";
    EXPECT_TRUE(bits(k2) == bits(k1)) << "k";
    EXPECT_TRUE(bits(kc2) == bits(kc1)) << "k_cache";
    EXPECT_TRUE(bits(vc2) == bits(vc1)) << "v_cache";
    EXPECT_EQ(download(v2), v) << "v changed";
    check_guards();
    guards_.clear();
    arena_->reset(mark);
    if (HasFailure()) return;
  }
  EXPECT_GE(fused_runs, 14);
}

}  // namespace
}  // namespace dapo::test
