// Paged KV cache: slot writes, and paged_attention equal to attention_forward
// on the same sequences for prefill, chunked prefill and decode, with
// shuffled non-contiguous block tables, a block size that divides no
// length, two sequences sharing their prefix blocks, and unwritten cache
// slots poisoned with NaN so that any read outside a context shows.
#include "dapo/ops/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "dapo/core/arena.h"
#include "dapo/ops/attention.h"
#include "ops/op_test_util.h"

namespace dapo {
namespace {

ops::Ctx ctx_with(Arena& scratch) {
  ops::Ctx ctx = test::cpu_ctx();
  ctx.scratch = &scratch;
  return ctx;
}

// Four sequences; sequence 1 repeats the first kShared tokens of sequence 0
// (two full blocks, shared physically, as the n samples of one prompt).
struct Paged {
  static constexpr int64_t Hq = 4, Hkv = 2, D = 6, BS = 3, NB = 16, max_blocks = 5;
  static constexpr int kShared = 6;
  std::vector<int> lens{8, 10, 1, 5};
  int64_t B = 4, T = 0;
  float scale = 1.0f / std::sqrt(float(D));
  std::vector<int32_t> cu;          // (B+1) offsets of the packed reference
  std::vector<float> q, k, v;       // packed (T, Hq, D), (T, Hkv, D)
  std::vector<float> ref_out, ref_lse;  // attention_forward on the packed batch
  std::vector<int32_t> table;       // (B, max_blocks)
  std::vector<float> kc, vc;        // (NB, BS, Hkv, D)

  Paged() {
    cu = {0};
    for (int len : lens) cu.push_back(cu.back() + len);
    T = cu.back();
    q = test::random_vector(size_t(T * Hq * D), 900, -1.5f, 1.5f);
    k = test::random_vector(size_t(T * Hkv * D), 901, -1.5f, 1.5f);
    v = test::random_vector(size_t(T * Hkv * D), 902);
    // Same prefix tokens -> same q, k, v at those positions.
    std::copy_n(q.begin(), kShared * Hq * D, q.begin() + cu[1] * Hq * D);
    std::copy_n(k.begin(), kShared * Hkv * D, k.begin() + cu[1] * Hkv * D);
    std::copy_n(v.begin(), kShared * Hkv * D, v.begin() + cu[1] * Hkv * D);

    ref_out.resize(q.size());
    ref_lse.resize(size_t(Hq * T));
    Arena scratch(1 << 20, Device::cpu, "test");
    ops::attention_forward(ctx_with(scratch), tensor_f32(ref_out.data(), {T, Hq, D}),
                           tensor_f32(ref_lse.data(), {Hq, T}), tensor_f32(q.data(), {T, Hq, D}),
                           tensor_f32(k.data(), {T, Hkv, D}), tensor_f32(v.data(), {T, Hkv, D}),
                           tensor_i32(cu.data(), {B + 1}), T, scale);

    // Physical blocks in shuffled order; unused table entries hold a block
    // id that does not exist, to show they are never read.
    std::vector<int32_t> perm(NB);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
    table.assign(size_t(B * max_blocks), 12345);
    int next = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t nblocks = (lens[b] + BS - 1) / BS;
      for (int64_t n = 0; n < nblocks; ++n)
        table[b * max_blocks + n] = (b == 1 && n < kShared / BS) ? table[n] : perm[next++];
    }
    kc.assign(size_t(NB * BS * Hkv * D), NAN);
    vc.assign(kc.size(), NAN);
  }

  int32_t slot(int64_t b, int64_t p) const {
    return table[b * max_blocks + p / BS] * int32_t(BS) + int32_t(p % BS);
  }
  bool shared_with_seq0(int64_t b, int64_t p) const { return b == 1 && p < kShared; }

  // Writes positions [from[b], to[b]) of every sequence with one
  // kv_cache_write call, as the engine does for the tokens of a step.
  // Sequence 1's shared prefix is skipped (slot -1): sequence 0 wrote it.
  void write(const std::vector<int>& from, const std::vector<int>& to) {
    std::vector<float> kn, vn;
    std::vector<int32_t> slots;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t p = from[b]; p < to[b]; ++p) {
        const int64_t row = (cu[b] + p) * Hkv * D;
        kn.insert(kn.end(), k.begin() + row, k.begin() + row + Hkv * D);
        vn.insert(vn.end(), v.begin() + row, v.begin() + row + Hkv * D);
        slots.push_back(shared_with_seq0(b, p) ? -1 : slot(b, p));
      }
    const int64_t N = int64_t(slots.size());
    ops::kv_cache_write(test::cpu_ctx(), tensor_f32(kc.data(), {NB, BS, Hkv, D}),
                        tensor_f32(vc.data(), {NB, BS, Hkv, D}), tensor_f32(kn.data(), {N, Hkv, D}),
                        tensor_f32(vn.data(), {N, Hkv, D}), tensor_i32(slots.data(), {N}));
  }

  // Caches positions [0, first_new[b]) in one step, then the new tokens
  // [first_new[b], len) in another, runs paged_attention on the new tokens
  // and compares with the reference rows of the same positions.
  void check(const std::vector<int>& first_new) {
    std::vector<int> zero(size_t(B), 0);
    write(zero, first_new);
    write(first_new, lens);
    std::vector<int32_t> cu_q{0}, ctx_lens(lens.begin(), lens.end());
    std::vector<float> qn;
    for (int64_t b = 0; b < B; ++b) {
      cu_q.push_back(cu_q.back() + lens[b] - first_new[b]);
      qn.insert(qn.end(), q.begin() + (cu[b] + first_new[b]) * Hq * D, q.begin() + cu[b + 1] * Hq * D);
    }
    const int64_t N = cu_q.back();
    std::vector<float> out(qn.size(), NAN);
    Arena scratch(1 << 16, Device::cpu, "test");
    ops::paged_attention(ctx_with(scratch), tensor_f32(out.data(), {N, Hq, D}),
                         tensor_f32(qn.data(), {N, Hq, D}), tensor_f32(kc.data(), {NB, BS, Hkv, D}),
                         tensor_f32(vc.data(), {NB, BS, Hkv, D}), tensor_i32(table.data(), {B, max_blocks}),
                         tensor_i32(ctx_lens.data(), {B}), tensor_i32(cu_q.data(), {B + 1}),
                         *std::max_element(lens.begin(), lens.end()), scale);
    EXPECT_EQ(scratch.used(), 0u);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t p = first_new[b]; p < lens[b]; ++p)
        for (int64_t e = 0; e < Hq * D; ++e)
          ASSERT_NEAR(out[(cu_q[b] + p - first_new[b]) * Hq * D + e], ref_out[(cu[b] + p) * Hq * D + e], 1e-6)
              << "sequence " << b << " position " << p << " element " << e;
  }
};

TEST(KvCache, WriteFillsOnlyTheAddressedSlots) {
  const int64_t NB = 3, BS = 2, Hkv = 2, D = 3, row = Hkv * D;
  std::vector<float> kc(size_t(NB * BS * row), -7.0f), vc(kc.size(), -7.0f);
  auto k = test::random_vector(size_t(4 * row), 1), v = test::random_vector(size_t(4 * row), 2);
  std::vector<int32_t> slots{5, -1, 0, 3};
  ops::kv_cache_write(test::cpu_ctx(), tensor_f32(kc.data(), {NB, BS, Hkv, D}),
                      tensor_f32(vc.data(), {NB, BS, Hkv, D}), tensor_f32(k.data(), {4, Hkv, D}),
                      tensor_f32(v.data(), {4, Hkv, D}), tensor_i32(slots.data(), {4}));
  for (int64_t s = 0; s < NB * BS; ++s) {
    const int64_t src = s == 5 ? 0 : s == 0 ? 2 : s == 3 ? 3 : -1;
    for (int64_t e = 0; e < row; ++e) {
      EXPECT_EQ(kc[s * row + e], src < 0 ? -7.0f : k[src * row + e]) << "slot " << s;
      EXPECT_EQ(vc[s * row + e], src < 0 ? -7.0f : v[src * row + e]) << "slot " << s;
    }
  }
  // Nothing to write is fine.
  ops::kv_cache_write(test::cpu_ctx(), tensor_f32(kc.data(), {NB, BS, Hkv, D}),
                      tensor_f32(vc.data(), {NB, BS, Hkv, D}), tensor_f32(nullptr, {0, Hkv, D}),
                      tensor_f32(nullptr, {0, Hkv, D}), tensor_i32(nullptr, {0}));
}

TEST(KvCache, PrefillMatchesAttentionForward) {
  Paged p;
  p.check({0, 0, 0, 0});
}

TEST(KvCache, DecodeMatchesLastRowOfAttentionForward) {
  Paged p;
  p.check({7, 9, 0, 4});  // one new token each; sequence 2 has only that one
}

TEST(KvCache, ChunkedPrefillMatchesAttentionForward) {
  Paged p;
  // Chunks starting inside a block, on a block boundary, right after the
  // shared prefix, and a sequence with no new token at all.
  p.check({4, 6, 0, 5});
  Paged p2;
  p2.check({2, 3, 1, 3});
}

TEST(KvCache, FixtureSharesPrefixBlocksAndIsNotContiguous) {
  // Guards the claims the other tests rely on: sequences 0 and 1 read the
  // same physical prefix blocks, then their own.
  Paged p;
  EXPECT_EQ(p.table[0], p.table[Paged::max_blocks + 0]);
  EXPECT_EQ(p.table[1], p.table[Paged::max_blocks + 1]);
  EXPECT_NE(p.table[2], p.table[Paged::max_blocks + 2]);
  // Block tables are not contiguous ranges.
  bool contiguous = true;
  for (int64_t n = 1; n < 3; ++n) contiguous &= p.table[n] == p.table[n - 1] + 1;
  EXPECT_FALSE(contiguous);
}

TEST(KvCacheDeathTest, BadSlotsAndTablesAreErrors) {
  std::vector<float> kc(2 * 2 * 1 * 4), vc(kc.size()), k(4), v(4), q(4), out(4);
  std::vector<int32_t> slots{4};
  EXPECT_EXIT(ops::kv_cache_write(test::cpu_ctx(), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                  tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_f32(k.data(), {1, 1, 4}),
                                  tensor_f32(v.data(), {1, 1, 4}), tensor_i32(slots.data(), {1})),
              testing::ExitedWithCode(1), "slot_mapping\\[0\\] = 4 outside");
  Arena scratch(1 << 16, Device::cpu, "test");
  std::vector<int32_t> table{0, 2}, lens{3}, cu_q{0, 1};
  EXPECT_EXIT(ops::paged_attention(ctx_with(scratch), tensor_f32(out.data(), {1, 1, 4}),
                                   tensor_f32(q.data(), {1, 1, 4}), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                   tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_i32(table.data(), {1, 2}),
                                   tensor_i32(lens.data(), {1}), tensor_i32(cu_q.data(), {2}), 3, 0.5f),
              testing::ExitedWithCode(1), "block_table\\[0, 1\\] = 2 outside");
  lens = {0};
  EXPECT_EXIT(ops::paged_attention(ctx_with(scratch), tensor_f32(out.data(), {1, 1, 4}),
                                   tensor_f32(q.data(), {1, 1, 4}), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                   tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_i32(table.data(), {1, 2}),
                                   tensor_i32(lens.data(), {1}), tensor_i32(cu_q.data(), {2}), 3, 0.5f),
              testing::ExitedWithCode(1), "1 new tokens but context length 0");
  lens = {3};
  table = {0, 1};
  EXPECT_EXIT(ops::paged_attention(ctx_with(scratch), tensor_f32(out.data(), {1, 1, 4}),
                                   tensor_f32(q.data(), {1, 1, 4}), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                   tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_i32(table.data(), {1, 2}),
                                   tensor_i32(lens.data(), {1}), tensor_i32(cu_q.data(), {2}), 2, 0.5f),
              testing::ExitedWithCode(1), "max_context_len = 2 but a sequence has context length 3");
}

TEST(KvCacheDeathTest, ContractIsCheckedBeforeTheBackend) {
  std::vector<float> kc(2 * 2 * 1 * 4), vc(kc.size()), k(4), v(4), q(4);
  std::vector<int32_t> slots{1};
  // The new key is read from the slot the op writes.
  EXPECT_EXIT(ops::kv_cache_write(test::cpu_ctx(), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                  tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_f32(kc.data() + 4, {1, 1, 4}),
                                  tensor_f32(v.data(), {1, 1, 4}), tensor_i32(slots.data(), {1})),
              testing::ExitedWithCode(1), "kv_cache_write: k_cache overlaps k");
  EXPECT_EXIT(ops::kv_cache_write(test::cpu_ctx(), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                  tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_f32(k.data(), {1, 1, 4}),
                                  Tensor(v.data(), DType::bf16, {1, 1, 4}), tensor_i32(slots.data(), {1})),
              testing::ExitedWithCode(1), "kv_cache_write: v is bf16, expected f32");
  Arena scratch(1 << 16, Device::cpu, "test");
  std::vector<int32_t> table{0, 1}, lens{3}, cu_q{0, 1};
  // out written over q.
  EXPECT_EXIT(ops::paged_attention(ctx_with(scratch), tensor_f32(q.data(), {1, 1, 4}),
                                   tensor_f32(q.data(), {1, 1, 4}), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                   tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_i32(table.data(), {1, 2}),
                                   tensor_i32(lens.data(), {1}), tensor_i32(cu_q.data(), {2}), 3, 0.5f),
              testing::ExitedWithCode(1), "paged_attention: out overlaps q");
  std::vector<float> out(4);
  EXPECT_EXIT(ops::paged_attention(ctx_with(scratch), tensor_f32(out.data(), {1, 1, 4}),
                                   tensor_f32(q.data(), {1, 1, 4}), tensor_f32(kc.data(), {2, 2, 1, 4}),
                                   tensor_f32(vc.data(), {2, 2, 1, 4}), tensor_i32(table.data(), {1, 2}),
                                   tensor_i32(lens.data(), {1}), tensor_i32(cu_q.data(), {2}), -1, 0.5f),
              testing::ExitedWithCode(1), "paged_attention: max_context_len = -1");
}

}  // namespace
}  // namespace dapo
