// Batch-invariant paged attention (ops::Ctx::batch_invariant, for
// rollout.exact_logprobs): a query row over the paged cache gets, bit for
// bit, its row of the trainer's packed attention_forward over the whole
// sequences, whatever the rows around it (decode rows, prefill chunks,
// whole prompts), the block size, the order of the blocks in the pool or
// the number of sequences; at Qwen2.5-1.5B's heads (D 128) and 0.5B's
// (D 64), at contexts on both sides of the 64-key blocks.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "dapo/ops/attention.h"
#include "dapo/ops/kv_cache.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

class AttentionExactGpu : public GpuTest {};

struct Heads {
  int64_t Hq, Hkv, D;
};

TEST_F(AttentionExactGpu, PagedRowsEqualThePackedForward) {
  const int64_t lens[] = {1, 63, 64, 65, 130, 700, 2049};
  const int64_t total = std::accumulate(std::begin(lens), std::end(lens), int64_t(0));
  const int64_t B = std::size(lens);
  for (const Heads hd : {Heads{12, 2, 128}, Heads{14, 2, 64}}) {
    SCOPED_TRACE(testing::Message() << "D " << hd.D);
    ArenaScope scope(*arena_);
    const float scale = 1.0f / std::sqrt(float(hd.D));
    const int64_t row_q = hd.Hq * hd.D, row_kv = hd.Hkv * hd.D;
    // The whole sequences, packed: the trainer's forward.
    const std::vector<float> q = random_bf16_exact(size_t(total * row_q), 11, -2, 2);
    const std::vector<float> k = random_bf16_exact(size_t(total * row_kv), 12, -2, 2);
    const std::vector<float> v = random_bf16_exact(size_t(total * row_kv), 13);
    std::vector<int32_t> cu{0};
    for (const int64_t L : lens) cu.push_back(cu.back() + int32_t(L));
    Tensor dq = upload(q, {total, hd.Hq, hd.D}, DType::bf16);
    Tensor dk = upload(k, {total, hd.Hkv, hd.D}, DType::bf16), dv = upload(v, {total, hd.Hkv, hd.D}, DType::bf16);
    Tensor packed = device_empty(DType::bf16, {total, hd.Hq, hd.D});
    Tensor lse = device_empty(DType::f32, {hd.Hq, total});
    ops::attention_forward(gpu(), packed, lse, dq, dk, dv, upload_raw(cu, {B + 1}), 2049, scale);
    const std::vector<unsigned char> want = bits(packed);
    const size_t row_bytes = size_t(row_q) * 2;

    // Each sequence's keys in a pool of shuffled blocks; queries: the last
    // q_len positions of each sequence (decode: 1, a chunk, or all).
    for (const int64_t bs : {int64_t(16), int64_t(1)})
      for (const int mode : {0, 1, 2}) {
        SCOPED_TRACE(testing::Message() << "block size " << bs << " mode " << mode);
        ArenaScope inner(*arena_);
        std::vector<int64_t> q_len(lens, lens + B);
        for (int64_t b = 0; b < B; ++b)
          q_len[size_t(b)] = mode == 0 ? 1 : mode == 1 ? std::min<int64_t>(lens[b], 1 + (b * 37) % 90) : lens[b];
        int64_t W = 0, blocks = 0;
        for (const int64_t L : lens) W = std::max(W, (L + bs - 1) / bs), blocks += (L + bs - 1) / bs;
        std::vector<int32_t> perm(static_cast<size_t>(blocks));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937(uint32_t(bs * 10 + mode)));
        std::vector<int32_t> table(size_t(B * W), -1), ctx_len, cu_q{0};
        std::vector<float> kc(size_t(blocks * bs * row_kv), 0.0f), vc(kc.size(), 0.0f), qn;
        int64_t next = 0;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t L = lens[b], s0 = cu[size_t(b)];
          for (int64_t j = 0; j < L; ++j) {
            if (j % bs == 0) table[size_t(b * W + j / bs)] = perm[size_t(next++)];
            const int64_t slot = int64_t(table[size_t(b * W + j / bs)]) * bs + j % bs;
            std::copy_n(k.begin() + (s0 + j) * row_kv, row_kv, kc.begin() + slot * row_kv);
            std::copy_n(v.begin() + (s0 + j) * row_kv, row_kv, vc.begin() + slot * row_kv);
          }
          for (int64_t j = L - q_len[size_t(b)]; j < L; ++j)
            qn.insert(qn.end(), q.begin() + (s0 + j) * row_q, q.begin() + (s0 + j + 1) * row_q);
          ctx_len.push_back(int32_t(L));
          cu_q.push_back(cu_q.back() + int32_t(q_len[size_t(b)]));
        }
        const int64_t N = cu_q.back();
        Tensor out = device_empty(DType::bf16, {N, hd.Hq, hd.D});
        ops::Ctx ctx = gpu();
        ctx.batch_invariant = true;
        ops::paged_attention(ctx, out, upload(qn, {N, hd.Hq, hd.D}, DType::bf16),
                             upload(kc, {blocks, bs, hd.Hkv, hd.D}, DType::bf16),
                             upload(vc, {blocks, bs, hd.Hkv, hd.D}, DType::bf16), upload_raw(table, {B, W}),
                             upload_raw(ctx_len, {B}), upload_raw(cu_q, {B + 1}), 2049, scale);
        const std::vector<unsigned char> got = bits(out);
        for (int64_t b = 0; b < B; ++b) {
          const int64_t first = cu[size_t(b) + 1] - q_len[size_t(b)];
          const bool same = std::equal(got.begin() + size_t(cu_q[size_t(b)]) * row_bytes,
                                       got.begin() + size_t(cu_q[size_t(b) + 1]) * row_bytes,
                                       want.begin() + size_t(first) * row_bytes);
          EXPECT_TRUE(same) << "sequence " << b << " of " << lens[b] << " positions, " << q_len[size_t(b)]
                            << " query rows";
        }
      }
  }
}

}  // namespace
}  // namespace dapo::test
