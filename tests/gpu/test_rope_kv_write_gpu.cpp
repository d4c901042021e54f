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

  // A run's inputs: positions up to 32k (0 and 32767 first), slots over a
  // shuffled pool about twice the batch with every 7th token skipped (-1),
  // bf16-exact values.
  struct Inputs {
    int64_t T = 0, Hq = 0, Hkv = 0, D = 0, NB = 0, BS = 16;
    std::vector<float> q, k, v, kc, vc;
    Tensor pos, slots;  // on the device
  };
  Inputs inputs(const shapes::RopeKvRun& r) {
    Inputs in;
    in.T = r.T, in.Hq = r.heads.Hq, in.Hkv = r.heads.Hkv, in.D = r.heads.D;
    in.NB = (2 * in.T + 40) / in.BS + 1;
    std::mt19937 gen(r.seed);
    std::vector<int32_t> pos(static_cast<size_t>(in.T)), all(static_cast<size_t>(in.NB * in.BS)), slots(pos.size());
    for (auto& p : pos) p = int32_t(gen() % 32768);
    if (in.T > 1) pos[0] = 0, pos[1] = 32767;
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    for (int64_t i = 0; i < in.T; ++i) slots[size_t(i)] = i % 7 == 2 ? -1 : all[size_t(i)];
    in.q = random_bf16_exact(size_t(in.T * in.Hq * in.D), r.seed + 1, -2, 2);
    in.k = random_bf16_exact(size_t(in.T * in.Hkv * in.D), r.seed + 2, -2, 2);
    in.v = random_bf16_exact(in.k.size(), r.seed + 3, -2, 2);
    in.kc = random_bf16_exact(size_t(in.NB * in.BS * in.Hkv * in.D), r.seed + 4);
    in.vc = random_bf16_exact(in.kc.size(), r.seed + 5);
    in.pos = upload_raw(pos, {in.T});
    in.slots = upload_raw(slots, {in.T});
    return in;
  }

  // The op's outputs (q2, k2, the caches, v2) against the reference's, bit
  // for bit, v unchanged; then the guards.
  void expect_same_bits(Tensor q2, Tensor k2, Tensor kc2, Tensor vc2, Tensor v2, Tensor q1, Tensor k1, Tensor kc1,
                        Tensor vc1, const std::vector<float>& v) {
    EXPECT_TRUE(bits(q2) == bits(q1)) << "q";
    EXPECT_TRUE(bits(k2) == bits(k1)) << "k";
    EXPECT_TRUE(bits(kc2) == bits(kc1)) << "k_cache";
    EXPECT_TRUE(bits(vc2) == bits(vc1)) << "v_cache";
    EXPECT_EQ(download(v2), v) << "v changed";
    check_guards();
    guards_.clear();
  }
};

TEST_F(RopeKvWriteGpu, EqualsTheThreeOps) {
  for (const shapes::RopeKvRun& r : shapes::rope_kv_write_runs()) {
    SCOPED_TRACE(testing::Message() << "T " << r.T << " Hq " << r.heads.Hq << " Hkv " << r.heads.Hkv << " D "
                                    << r.heads.D << " q shift " << r.q_shift);
    const size_t mark = arena_->mark();
    const Inputs in = inputs(r);
    const std::initializer_list<int64_t> qd{in.T, in.Hq, in.D}, kd{in.T, in.Hkv, in.D}, cd{in.NB, in.BS, in.Hkv, in.D};

    // The three ops.
    Tensor q1 = upload(in.q, qd, DType::bf16), k1 = upload(in.k, kd, DType::bf16), v1 = upload(in.v, kd, DType::bf16);
    Tensor kc1 = upload(in.kc, cd, DType::bf16), vc1 = upload(in.vc, cd, DType::bf16);
    ops::rope_forward(gpu(), q1, q1, in.pos, ops::kRopeThetaQwen2);
    ops::rope_forward(gpu(), k1, k1, in.pos, ops::kRopeThetaQwen2);
    ops::kv_cache_write(gpu(), kc1, vc1, k1, v1, in.slots);

    // The fused op.
    Tensor q2 = guarded_copy(in.q, qd, r.q_shift), k2 = guarded_copy(in.k, kd), v2 = guarded_copy(in.v, kd);
    Tensor kc2 = guarded_copy(in.kc, cd), vc2 = guarded_copy(in.vc, cd);
    ops::rope_kv_write(gpu(), q2, k2, kc2, vc2, v2, in.pos, in.slots, ops::kRopeThetaQwen2);

    expect_same_bits(q2, k2, kc2, vc2, v2, q1, k1, kc1, vc1, in.v);
    arena_->reset(mark);
  }
}

// The reference norms q and k out of place (rmsnorm_forward's contract),
// from and into copies as (mis)aligned as the op's q, so that the norm
// takes the same path (16-byte packs or elements) as the op's fallback.
TEST_F(RopeKvWriteGpu, HeadNormEqualsRmsnormThenRopeKvWrite) {
  int fused_runs = 0;
  for (const shapes::RopeKvRun& r : shapes::rope_kv_write_head_norm_runs()) {
    SCOPED_TRACE(testing::Message() << "T " << r.T << " Hq " << r.heads.Hq << " Hkv " << r.heads.Hkv << " D "
                                    << r.heads.D << " q shift " << r.q_shift);
    const size_t mark = arena_->mark();
    const Inputs in = inputs(r);
    const int64_t T = in.T, Hq = in.Hq, Hkv = in.Hkv, D = in.D;
    const std::initializer_list<int64_t> qd{T, Hq, D}, kd{T, Hkv, D}, cd{in.NB, in.BS, Hkv, D};
    const auto wq = random_bf16_exact(size_t(D), r.seed + 6, 0.5f, 1.5f), wk = random_bf16_exact(size_t(D), r.seed + 7);
    const float eps = 1e-6f;
    const ops::HeadNorm hn{upload(wq, {D}, DType::bf16), upload(wk, {D}, DType::bf16), eps};

    // rmsnorm_forward on the head rows, then the op without the norm.
    Tensor q0 = guarded_copy(in.q, qd, r.q_shift), k0 = guarded_copy(in.k, kd);
    Tensor q1 = guarded_copy(in.q, qd, r.q_shift), k1 = guarded_copy(in.k, kd), v1 = guarded_copy(in.v, kd);
    Tensor kc1 = guarded_copy(in.kc, cd), vc1 = guarded_copy(in.vc, cd);
    ops::rmsnorm_forward(gpu(), q1.reshape({T * Hq, D}), device_empty(DType::f32, {T * Hq}), q0.reshape({T * Hq, D}),
                         hn.q_weight, eps);
    ops::rmsnorm_forward(gpu(), k1.reshape({T * Hkv, D}), device_empty(DType::f32, {T * Hkv}),
                         k0.reshape({T * Hkv, D}), hn.k_weight, eps);
    ops::rope_kv_write(gpu(), q1, k1, kc1, vc1, v1, in.pos, in.slots, ops::kRopeThetaQwen2);

    // The op with the norm.
    Tensor q2 = guarded_copy(in.q, qd, r.q_shift), k2 = guarded_copy(in.k, kd), v2 = guarded_copy(in.v, kd);
    Tensor kc2 = guarded_copy(in.kc, cd), vc2 = guarded_copy(in.vc, cd);
    const bool fused = ops::cuda::detail::rope_kv_write_head_norm_fused(q2, k2, kc2, vc2, v2, hn);
    EXPECT_EQ(fused, shapes::head_norm_fused(r));
    fused_runs += fused;
    ops::rope_kv_write(gpu(), q2, k2, kc2, vc2, v2, in.pos, in.slots, ops::kRopeThetaQwen2, hn);

    expect_same_bits(q2, k2, kc2, vc2, v2, q1, k1, kc1, vc1, in.v);
    arena_->reset(mark);
    if (HasFailure()) return;
  }
  EXPECT_GE(fused_runs, 14);
}

}  // namespace
}  // namespace dapo::test
