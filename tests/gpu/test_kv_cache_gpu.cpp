// Paged KV cache ops on the GPU (bf16 caches) against the CPU reference:
// slot writes with skipped slots, block copies, and paged attention for
// decode (short contexts, block-boundary lengths, split-KV long contexts),
// shuffled and shared physical blocks, chunked prefill, GQA groups 2/6/7,
// head dims 16..128 and block sizes 16 and 32; reruns are bit-identical.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "dapo/ops/kv_cache.h"
#include "dapo/ops/kv_copy.h"
#include "gpu/gpu_perf_util.h"
#include "gpu/gpu_test_util.h"

namespace dapo::test {
namespace {

template <class T>
Tensor host_tensor(std::vector<T>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), dtype_of<T>(), dims);
}

struct AttnCase {
  int64_t Hq, Hkv, D, BS;
  std::vector<int> lens;  // context length of each sequence, new tokens included
  std::vector<int> nq;    // new tokens of each sequence
  bool share_prefix;      // sequences 0 and 1 read the same first blocks
};

class KvCacheGpu : public GpuTest {
 protected:
  void run_attention(const AttnCase& c, uint32_t seed) {
    const int64_t B = int64_t(c.lens.size()), Hq = c.Hq, Hkv = c.Hkv, D = c.D, BS = c.BS;
    SCOPED_TRACE(testing::Message() << "B " << B << " Hq " << Hq << " Hkv " << Hkv << " D " << D << " BS " << BS
                                    << " max len " << *std::max_element(c.lens.begin(), c.lens.end()));
    int64_t max_blocks = 0, total_blocks = 0;
    for (int len : c.lens) {
      max_blocks = std::max<int64_t>(max_blocks, (len + BS - 1) / BS);
      total_blocks += (len + BS - 1) / BS;
    }
    max_blocks += 1;  // a table wider than needed: entries past a sequence are ignored
    const int64_t NB = total_blocks + 3;
    std::vector<int32_t> perm(static_cast<size_t>(NB));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    std::vector<int32_t> table(size_t(B * max_blocks), 0);
    size_t next = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < (c.lens[b] + BS - 1) / BS; ++n) table[size_t(b * max_blocks + n)] = perm[next++];
    if (c.share_prefix) {
      const int64_t shared = std::min(c.lens[0], c.lens[1]) / BS;
      for (int64_t n = 0; n < shared; ++n) table[size_t(max_blocks + n)] = table[size_t(n)];
    }
    std::vector<int32_t> lens(c.lens.begin(), c.lens.end()), cu{0};
    for (int n : c.nq) cu.push_back(cu.back() + n);
    const int64_t N = cu.back();
    const int64_t max_len = *std::max_element(c.lens.begin(), c.lens.end());
    const float scale = 1.0f / std::sqrt(float(D));

    auto kc = random_bf16_exact(size_t(NB * BS * Hkv * D), seed + 1);
    auto vc = random_bf16_exact(size_t(NB * BS * Hkv * D), seed + 2);
    auto q = random_bf16_exact(size_t(N * Hq * D), seed + 3, -3, 3);  // peaky softmax rows
    std::vector<float> want(size_t(N * Hq * D));
    ops::paged_attention(cpu(), host_tensor(want, {N, Hq, D}), host_tensor(q, {N, Hq, D}),
                         host_tensor(kc, {NB, BS, Hkv, D}), host_tensor(vc, {NB, BS, Hkv, D}),
                         host_tensor(table, {B, max_blocks}), host_tensor(lens, {B}), host_tensor(cu, {B + 1}),
                         max_len, scale);

    Tensor dk = upload(kc, {NB, BS, Hkv, D}, DType::bf16), dv = upload(vc, {NB, BS, Hkv, D}, DType::bf16);
    Tensor dq = upload(q, {N, Hq, D}, DType::bf16);
    Tensor dt = upload_raw(table, {B, max_blocks}), dl = upload_raw(lens, {B}), dcu = upload_raw(cu, {B + 1});
    Tensor out1 = guarded(DType::bf16, {N, Hq, D}), out2 = guarded(DType::bf16, {N, Hq, D});
    ops::paged_attention(gpu(), out1, dq, dk, dv, dt, dl, dcu, max_len, scale);
    ops::paged_attention(gpu(), out2, dq, dk, dv, dt, dl, dcu, max_len, scale);
    device_->synchronize();
    const auto got1 = download(out1), got2 = download(out2);
    for (float x : got1) ASSERT_TRUE(std::isfinite(x));
    expect_close(got1, want, 6e-3, 1e-2, "out");
    EXPECT_EQ(0, std::memcmp(got1.data(), got2.data(), got1.size() * sizeof(float))) << "reruns differ";
    check_guards();
  }
};

TEST_F(KvCacheGpu, DecodeMatchesCpu) {
  // One new token per sequence: lengths around a block, and long contexts
  // (split-KV with the merge); sequences 0 and 1 share their prefix blocks.
  run_attention({12, 2, 128, 16, {1000, 5000, 1, 15, 16, 17}, {1, 1, 1, 1, 1, 1}, true}, 1);
  run_attention({14, 2, 64, 32, {2100, 700, 1, 33, 64}, {1, 1, 1, 1, 1}, true}, 2);    // group 7
  run_attention({4, 2, 32, 16, {5, 100, 128, 17}, {1, 1, 1, 1}, false}, 3);           // group 2, one partition
  run_attention({2, 1, 16, 16, {300, 40, 1}, {1, 1, 1}, true}, 4);                    // D = 16
  run_attention({12, 1, 128, 32, {777, 3}, {1, 1}, false}, 5);                        // group 12: two row tiles
}

TEST_F(KvCacheGpu, ChunkedPrefillMatchesCpu) {
  // Several new tokens per sequence (the last nq positions of each context),
  // a whole prefill, a sequence with no new token, and a long one split over
  // partitions.
  run_attention({12, 2, 128, 16, {40, 100, 17, 600, 9}, {40, 7, 1, 300, 0}, true}, 6);
  run_attention({14, 2, 64, 32, {1500, 70, 3}, {33, 70, 2}, false}, 7);
  run_attention({4, 2, 32, 16, {50, 50}, {50, 13}, true}, 8);
}

TEST_F(KvCacheGpu, WriteMatchesCpu) {
  struct Case {
    int64_t NB, BS, Hkv, D, N;
  };
  // 2 x 128 (16-byte copies), and a row of 12 elements (the element path).
  for (const Case c : {Case{20, 16, 2, 128, 37}, Case{5, 3, 1, 12, 9}, Case{4, 16, 2, 64, 0}}) {
    SCOPED_TRACE(testing::Message() << "D " << c.D << " N " << c.N);
    const int64_t slots_total = c.NB * c.BS;
    std::vector<int32_t> all(static_cast<size_t>(slots_total));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), std::mt19937(11));
    std::vector<int32_t> slots(static_cast<size_t>(c.N));
    for (int64_t i = 0; i < c.N; ++i) slots[size_t(i)] = i % 4 == 1 ? -1 : all[size_t(i)];
    auto kc = random_bf16_exact(size_t(slots_total * c.Hkv * c.D), 12);
    auto vc = random_bf16_exact(kc.size(), 13);
    auto k = random_bf16_exact(size_t(c.N * c.Hkv * c.D), 14), v = random_bf16_exact(k.size(), 15);
    Tensor dkc = upload(kc, {c.NB, c.BS, c.Hkv, c.D}, DType::bf16), dvc = upload(vc, {c.NB, c.BS, c.Hkv, c.D}, DType::bf16);
    Tensor dk = upload(k, {c.N, c.Hkv, c.D}, DType::bf16), dv = upload(v, {c.N, c.Hkv, c.D}, DType::bf16);
    Tensor ds = upload_raw(slots, {c.N});
    ops::kv_cache_write(cpu(), host_tensor(kc, {c.NB, c.BS, c.Hkv, c.D}), host_tensor(vc, {c.NB, c.BS, c.Hkv, c.D}),
                        host_tensor(k, {c.N, c.Hkv, c.D}), host_tensor(v, {c.N, c.Hkv, c.D}), host_tensor(slots, {c.N}));
    ops::kv_cache_write(gpu(), dkc, dvc, dk, dv, ds);
    device_->synchronize();
    EXPECT_EQ(download(dkc), kc);
    EXPECT_EQ(download(dvc), vc);
  }
}

TEST_F(KvCacheGpu, BlockCopyMatchesCpu) {
  for (const int64_t D : {int64_t(128), int64_t(5)}) {
    const int64_t NB = 12, BS = 16, Hkv = 2;
    auto kc = random_bf16_exact(size_t(NB * BS * Hkv * D), 21), vc = random_bf16_exact(kc.size(), 22);
    std::vector<int32_t> src{3, 0, 7, 3, 11}, dst{1, 5, 2, 9, 4};
    Tensor dkc = upload(kc, {NB, BS, Hkv, D}, DType::bf16), dvc = upload(vc, {NB, BS, Hkv, D}, DType::bf16);
    Tensor dsrc = upload_raw(src, {5}), ddst = upload_raw(dst, {5});
    ops::kv_block_copy(cpu(), host_tensor(kc, {NB, BS, Hkv, D}), host_tensor(vc, {NB, BS, Hkv, D}),
                       host_tensor(src, {5}), host_tensor(dst, {5}));
    ops::kv_block_copy(gpu(), dkc, dvc, dsrc, ddst);
    ops::kv_block_copy(gpu(), dkc, dvc, Tensor(nullptr, DType::i32, {0}, Device::cuda),
                       Tensor(nullptr, DType::i32, {0}, Device::cuda));
    device_->synchronize();
    EXPECT_EQ(download(dkc), kc) << "D " << D;
    EXPECT_EQ(download(dvc), vc) << "D " << D;
  }
}

// Decode at batch 128 on Qwen2.5-1.5B's attention shape; bandwidth is the
// K and V bytes the contexts hold over the time (each read once).
TEST_F(KvCacheGpu, PagedAttentionDecodePerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  const ops::Ctx ctx = gpu();
  Arena big(size_t(3) << 30, Device::cuda, "perf");
  const int64_t B = 128, Hq = 12, Hkv = 2, D = 128, BS = 16;
  for (const int64_t len : {int64_t(512), int64_t(2048), int64_t(8192)}) {
    ArenaScope scope(big);
    const int64_t per_seq = len / BS, NB = B * per_seq;
    Tensor kc = big.alloc(DType::bf16, {NB, BS, Hkv, D}), vc = big.alloc(DType::bf16, {NB, BS, Hkv, D});
    fill_random(*device_, kc, 1);
    fill_random(*device_, vc, 2);
    Tensor q = big.alloc(DType::bf16, {B, Hq, D}), out = big.alloc(DType::bf16, {B, Hq, D});
    fill_random(*device_, q, 3, -3, 3);
    std::vector<int32_t> table(static_cast<size_t>(NB)), lens(static_cast<size_t>(B), static_cast<int32_t>(len)), cu(static_cast<size_t>(B + 1));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(4));
    std::iota(cu.begin(), cu.end(), 0);
    Tensor dt = upload_raw(table, {B, per_seq}), dl = upload_raw(lens, {B}), dcu = upload_raw(cu, {B + 1});
    const double ms = time_ms(ctx.stream, [&] {
      ops::paged_attention(ctx, out, q, kc, vc, dt, dl, dcu, len, 1.0f / std::sqrt(float(D)));
    }, 20);
    const double bytes = double(B) * double(len) * Hkv * D * 2 * 2;
    const std::string shape = "B=128,Hq=12,Hkv=2,D=128,BS=16,ctx=" + std::to_string(len);
    print_perf("paged_attention_decode", shape, "bf16", ms, bytes);
    std::printf("{\"op\":\"paged_attention_decode\",\"shape\":\"%s\",\"fraction_of_3000gbps\":%.3f}\n", shape.c_str(),
                bytes / (ms * 1e6) / 3000.0);
  }
}

}  // namespace
}  // namespace dapo::test
