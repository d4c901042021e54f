// Paged KV cache ops on the GPU (bf16 caches) against the CPU reference:
// slot writes with skipped slots, block copies, and paged attention for
// decode (short contexts, block-boundary lengths, split-KV long contexts),
// shuffled and shared physical blocks, chunked prefill, GQA groups 2/6/7/12,
// head dims 16..128, block sizes 16, 24 and 32, the Qwen2.5 shapes with
// ragged batches up to 20k positions; reruns are bit-identical.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>

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
  bool share_prefix;      // sequences 0 and 1 read the same first blocks (needs 2+)
};

using ops::cuda::detail::PagedSplit;

class KvCacheGpu : public GpuTest {
 protected:
  // With `split`, that spread over CTAs instead of the planned one.
  void run_attention(const AttnCase& c, uint32_t seed, const PagedSplit* split = nullptr) {
    const int64_t B = int64_t(c.lens.size()), Hq = c.Hq, Hkv = c.Hkv, D = c.D, BS = c.BS;
    SCOPED_TRACE(testing::Message() << "B " << B << " Hq " << Hq << " Hkv " << Hkv << " D " << D << " BS " << BS
                                    << " max len " << *std::max_element(c.lens.begin(), c.lens.end())
                                    << (split ? " forced split: groups " : "") << (split ? split->groups : 0)
                                    << (split ? " cluster " : "") << (split ? split->cluster : 0)
                                    << (split ? " qsplit " : "") << (split ? split->qsplit : 0));
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
      ASSERT_GE(B, 2) << "share_prefix needs two sequences";
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
    for (const Tensor& o : {out1, out2}) {
      if (split != nullptr)
        ops::cuda::detail::paged_attention_with_split(gpu(), o, dq, dk, dv, dt, dl, dcu, max_len, scale, *split);
      else
        ops::paged_attention(gpu(), o, dq, dk, dv, dt, dl, dcu, max_len, scale);
    }
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

TEST_F(KvCacheGpu, DecodeQwenShapesMatchCpu) {
  // Qwen2.5-0.5B (GQA 7, D 64), 1.5B (GQA 6, D 128), 7B (GQA 7, D 128):
  // ragged batches of one-token sequences from 1 to 20000 positions (split-KV
  // over many partitions, partitions past a short sequence's end), the first
  // two sharing their prompt blocks.
  run_attention({14, 2, 64, 16, {20000, 4095, 17, 1}, {1, 1, 1, 1}, true}, 31);
  run_attention({12, 2, 128, 16, {4095, 20000, 1, 17}, {1, 1, 1, 1}, true}, 32);
  run_attention({28, 4, 128, 16, {20000, 20000, 4095, 17, 1}, {1, 1, 1, 1, 1}, true}, 33);
  // A wider batch of random lengths, and a block size that is not a power of two.
  std::mt19937 gen(34);
  std::vector<int> lens(24), ones(24, 1);
  for (int& len : lens) len = 1 + int(gen() % 6000);
  run_attention({14, 2, 64, 16, lens, ones, true}, 35);
  run_attention({28, 4, 128, 24, {3001, 3001, 50, 777}, {1, 1, 1, 1}, true}, 36);
  // The tail of a round: at most 4 (sequence, KV head) items at 4k+
  // positions, planned as clusters of 8 CTAs (one of them past the shorter
  // sequence's end).
  run_attention({12, 2, 128, 16, {8192}, {1}, false}, 37);
  run_attention({14, 2, 64, 16, {20000, 4097}, {1, 1}, true}, 38);
  run_attention({28, 4, 128, 16, {5000}, {1}, false}, 39);
  // 5 to 16 items: one cluster of 8 per item, ragged (a sequence shorter
  // than the cluster's reach, one a block past a partition).
  run_attention({12, 2, 128, 16, {4096, 6000, 300, 4113}, {1, 1, 1, 1}, true}, 40);
  run_attention({14, 2, 64, 16, {8192, 4100, 4096, 9, 5000, 7000, 4097, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, false}, 41);
}

TEST_F(KvCacheGpu, ChunkedPrefillMatchesCpu) {
  // Several new tokens per sequence (the last nq positions of each context),
  // a whole prefill, a sequence with no new token, and a long one split over
  // partitions.
  run_attention({12, 2, 128, 16, {40, 100, 17, 600, 9}, {40, 7, 1, 300, 0}, true}, 6);
  run_attention({14, 2, 64, 32, {1500, 70, 3}, {33, 70, 2}, false}, 7);
  run_attention({4, 2, 32, 16, {50, 50}, {50, 13}, true}, 8);
  run_attention({28, 4, 128, 16, {3000, 45, 700}, {20, 45, 1}, true}, 9);  // 7B: a chunk after a long prefix
}

TEST_F(KvCacheGpu, ForcedSplitsMatchCpu) {
  // Every cluster size with one and several merge groups: ragged batches
  // where some CTAs of a cluster, or whole merge groups, lie past a
  // sequence's end; a GQA group of 12 (two row tiles, two cluster merges per
  // CTA); prefill rows through clusters; the launch without PDL.
  // Both kernels: registers (stages 0) and shared memory (2, 3 stages).
  for (const int64_t stages : {0, 2, 3}) {
    for (const int64_t cluster : {1, 2, 4, 8}) {
      for (const int64_t groups : {1, 3}) {
        PagedSplit sp;
        sp.groups = groups;
        sp.cluster = cluster;
        sp.stages = stages;
        run_attention({14, 2, 64, 16, {2000, 700, 1, 33, 300}, {1, 1, 1, 1, 1}, true}, 40, &sp);
        run_attention({12, 2, 128, 16, {1500, 17, 900}, {1, 1, 1}, false}, 41, &sp);
        run_attention({12, 1, 128, 32, {777, 3}, {1, 1}, false}, 42, &sp);
        run_attention({14, 2, 64, 24, {1000, 49}, {1, 1}, false}, 45, &sp);  // block size 24
        PagedSplit pre = sp;
        pre.qsplit = 3;
        run_attention({28, 4, 128, 16, {700, 45, 300}, {20, 45, 1}, true}, 43, &pre);
        run_attention({14, 2, 64, 32, {1500, 70, 3}, {33, 70, 2}, false}, 46, &pre);
      }
    }
  }
  PagedSplit plain;
  plain.cluster = 2;
  plain.pdl = false;
  run_attention({14, 2, 64, 16, {513, 64, 1}, {1, 1, 1}, true}, 44, &plain);
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

// Decode (one new token per sequence) on the Qwen2.5 attention shapes;
// bandwidth is the K and V bytes the contexts hold over the time (each read
// once; q and out are negligible). The calls are captured in a CUDA graph
// (as the engine will run them: this also checks that the op is
// capturable) and rotate over block tables into different parts of a 2 GiB
// pool so that the cache is read from HBM, not L2.
class DecodePerf {
 public:
  DecodePerf(const ops::CudaDevice& dev, const ops::Ctx& ctx)
      : dev_(dev), ctx_(ctx), stream_(static_cast<cudaStream_t>(ctx.stream)),
        big_(size_t(2 * kPoolBytes) + (size_t(256) << 20), Device::cuda, "perf") {
    kpool_ = big_.alloc(DType::bf16, {kPoolBytes / 2});
    vpool_ = big_.alloc(DType::bf16, {kPoolBytes / 2});
    // Random 64 MiB, repeated over the pools by device copies.
    const int64_t chunk = int64_t(32) << 20;
    fill_random(dev_, Tensor(kpool_.data, DType::bf16, {chunk}, Device::cuda), 1);
    fill_random(dev_, Tensor(vpool_.data, DType::bf16, {chunk}, Device::cuda), 2);
    for (int64_t off = chunk; off < kPoolBytes / 2; off += chunk) {
      const size_t n = size_t(std::min(chunk, kPoolBytes / 2 - off)) * 2;
      EXPECT_EQ(cudaMemcpyAsync(static_cast<bf16*>(kpool_.data) + off, kpool_.data, n, cudaMemcpyDeviceToDevice, stream_),
                cudaSuccess);
      EXPECT_EQ(cudaMemcpyAsync(static_cast<bf16*>(vpool_.data) + off, vpool_.data, n, cudaMemcpyDeviceToDevice, stream_),
                cudaSuccess);
    }
  }

  // The copy ceiling of this card (bytes read + written), GB/s.
  double copy_gbps() {
    const int64_t n = int64_t(1) << 30;
    const double ms = time_ms(ctx_.stream, [&] {
      EXPECT_EQ(cudaMemcpyAsync(vpool_.data, kpool_.data, size_t(n), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
    }, 10, 2);
    return 2.0 * double(n) / (ms * 1e6);
  }

  // Milliseconds per decode call (B sequences of len positions) for each
  // split (null: the planned one), or empty when the pool is too small.
  std::vector<double> decode_ms(int64_t Hq, int64_t Hkv, int64_t D, int64_t B, int64_t len,
                                const std::function<Tensor(const std::vector<int32_t>&, std::initializer_list<int64_t>)>& up,
                                const std::vector<const PagedSplit*>& splits = {nullptr}) {
    const int64_t per_seq = (len + kBS - 1) / kBS, NB = B * per_seq, pool_blocks = kPoolBytes / (kBS * Hkv * D * 2);
    if (NB > pool_blocks) return {};
    ArenaScope scope(big_);
    const double bytes = double(B) * double(len) * double(Hkv * D) * 2 * 2;
    const int64_t rot =
        std::clamp<int64_t>(int64_t(std::ceil(1e9 / bytes)), 1, std::min<int64_t>(8, pool_blocks / NB));
    Tensor kc(kpool_.data, DType::bf16, {pool_blocks, kBS, Hkv, D}, Device::cuda);
    Tensor vc(vpool_.data, DType::bf16, {pool_blocks, kBS, Hkv, D}, Device::cuda);
    Tensor q = big_.alloc(DType::bf16, {B, Hq, D}), out = big_.alloc(DType::bf16, {B, Hq, D});
    fill_random(dev_, q, 3, -3, 3);
    std::vector<int32_t> lens(static_cast<size_t>(B), static_cast<int32_t>(len)), cu(static_cast<size_t>(B + 1));
    std::iota(cu.begin(), cu.end(), 0);
    Tensor dl = up(lens, {B}), dcu = up(cu, {B + 1});
    std::vector<Tensor> tables;
    for (int64_t r = 0; r < rot; ++r) {
      std::vector<int32_t> table(static_cast<size_t>(NB));
      std::iota(table.begin(), table.end(), int32_t(r * NB));
      std::shuffle(table.begin(), table.end(), std::mt19937(uint32_t(4 + r)));
      tables.push_back(up(table, {B, per_seq}));
    }
    const float scale = 1.0f / std::sqrt(float(D));
    std::vector<double> result;
    for (const PagedSplit* split : splits) {
      auto call = [&](int i) {
        const Tensor& t = tables[size_t(i % rot)];
        if (split != nullptr)
          ops::cuda::detail::paged_attention_with_split(ctx_, out, q, kc, vc, t, dl, dcu, len, scale, *split);
        else
          ops::paged_attention(ctx_, out, q, kc, vc, t, dl, dcu, len, scale);
      };
      for (int i = 0; i < int(rot); ++i) call(i);  // warm-up, outside the capture
      constexpr int kCalls = 20;
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      for (int i = 0; i < kCalls; ++i) call(i);
      EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
      EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      // The median of 7 replays (20 calls each).
      std::vector<double> reps;
      for (int r = 0; r < 7; ++r)
        reps.push_back(time_ms(ctx_.stream, [&] { EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess); }, 1,
                               r == 0 ? 1 : 0) /
                       kCalls);
      std::sort(reps.begin(), reps.end());
      result.push_back(reps[3]);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    }
    return result;
  }

  static constexpr int64_t kBS = 16;
  static constexpr int64_t kPoolBytes = int64_t(2) << 30;

 private:
  const ops::CudaDevice& dev_;
  ops::Ctx ctx_;
  cudaStream_t stream_;
  Arena big_;
  Tensor kpool_, vpool_;
};

struct PerfModel {
  const char* name;
  int64_t Hq, Hkv, D;
};
constexpr PerfModel kPerfModels[] = {{"0.5B", 14, 2, 64}, {"1.5B", 12, 2, 128}, {"7B", 28, 4, 128}};

TEST_F(KvCacheGpu, PagedAttentionDecodePerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  DecodePerf perf(*device_, gpu());
  std::printf("{\"op\":\"device_copy\",\"gbps\":%.1f}\n", perf.copy_gbps());
  auto up = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> dims) { return upload_raw(v, dims); };
  struct Shape {
    int64_t B, len;
  };
  // What a decode step mostly sees (batches of 64..256 at 256..2048
  // positions), then long contexts.
  const Shape shapes[] = {{64, 256},   {64, 512},   {64, 1024},  {64, 2048},   {128, 256}, {128, 512},
                          {128, 1024}, {128, 2048}, {256, 256},  {256, 512},   {256, 1024}, {256, 2048},
                          {8, 4096},   {8, 16384},  {8, 32768},  {32, 8192},   {32, 32768}, {128, 4096},
                          {128, 16384}};
  for (const PerfModel& m : kPerfModels) {
    for (const Shape& sh : shapes) {
      const std::vector<double> ms = perf.decode_ms(m.Hq, m.Hkv, m.D, sh.B, sh.len, up);
      if (ms.empty()) continue;
      const double bytes = double(sh.B) * double(sh.len) * double(m.Hkv * m.D) * 2 * 2;
      const double gbps = bytes / (ms[0] * 1e6);
      const size_t scratch = ops::cuda::paged_attention_scratch_bytes(sh.B, sh.B, m.Hq, m.Hkv, m.D, sh.len);
      const PagedSplit sp = ops::cuda::detail::paged_attention_split(sh.B, sh.B, m.Hq, m.Hkv, m.D, sh.len);
      std::printf("{\"op\":\"paged_attention_decode\",\"model\":\"%s\",\"shape\":\"B=%lld,Hq=%lld,Hkv=%lld,D=%lld,"
                  "BS=16,ctx=%lld\",\"ms\":%.4f,\"gbps\":%.1f,\"fraction_of_3350gbps\":%.3f,\"groups\":%lld,"
                  "\"cluster\":%lld,\"stages\":%lld,\"scratch_mib\":%.2f}\n",
                  m.name, (long long)sh.B, (long long)m.Hq, (long long)m.Hkv, (long long)m.D, (long long)sh.len, ms[0],
                  gbps, gbps / 3350.0, (long long)sp.groups, (long long)sp.cluster, (long long)sp.stages,
                  double(scratch) / double(1 << 20));
      std::fflush(stdout);
    }
  }
}

// Tuning aid (the data make_plan's model is fitted to): GB/s of forced
// splits, "p" or "n" (with or without PDL), groups, "c", cluster size.
TEST_F(KvCacheGpu, PagedAttentionSplitSweepPerf) {
  if (!gpu_perf_enabled()) GTEST_SKIP() << "set DAPO_GPU_PERF=1";
  DecodePerf perf(*device_, gpu());
  auto up = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> dims) { return upload_raw(v, dims); };
  struct Variant {
    int64_t stages, groups, cluster;
  };
  auto sweep = [&](const PerfModel& m, int64_t B, int64_t len, const std::vector<Variant>& vs) {
    std::vector<PagedSplit> splits(vs.size());
    std::vector<const PagedSplit*> ptrs{nullptr};
    for (size_t i = 0; i < vs.size(); ++i) {
      splits[i].stages = vs[i].stages;
      splits[i].groups = vs[i].groups;
      splits[i].cluster = vs[i].cluster;
      ptrs.push_back(&splits[i]);
    }
    const std::vector<double> ms = perf.decode_ms(m.Hq, m.Hkv, m.D, B, len, up, ptrs);
    if (ms.empty()) return;
    const double bytes = double(B) * double(len) * double(m.Hkv * m.D) * 2 * 2;
    const PagedSplit sp = ops::cuda::detail::paged_attention_split(B, B, m.Hq, m.Hkv, m.D, len);
    std::printf("{\"sweep\":\"%s\",\"B\":%lld,\"ctx\":%lld,\"plan\":\"s%lldg%lldc%lld\",\"planned\":%.0f",
                m.name, (long long)B, (long long)len, (long long)sp.stages, (long long)sp.groups, (long long)sp.cluster,
                bytes / (ms[0] * 1e6));
    for (size_t i = 0; i < vs.size(); ++i)
      std::printf(",\"s%lldg%lldc%lld\":%.0f", (long long)vs[i].stages, (long long)vs[i].groups,
                  (long long)vs[i].cluster, bytes / (ms[i + 1] * 1e6));
    std::printf("}\n");
    std::fflush(stdout);
  };
  const std::vector<Variant> short_vs = {{0, 1, 1}, {3, 1, 1}, {3, 1, 2}, {3, 2, 1}, {3, 1, 4},
                                         {2, 1, 1}, {2, 1, 2}, {2, 2, 1}, {2, 1, 4}};
  const std::vector<Variant> long_vs = {{0, 8, 1},  {0, 16, 1}, {3, 2, 1}, {3, 4, 1}, {3, 8, 1}, {3, 16, 1},
                                        {3, 32, 1}, {3, 1, 4},  {3, 2, 4}, {3, 4, 4}, {2, 4, 1}, {2, 8, 1},
                                        {2, 16, 1}};
  // The tail of a generation round: a few long sequences (DAPO's longest
  // answers), where every KV head's context must be spread over many CTAs.
  // DAPO_SWEEP_TAIL=1 runs this part alone.
  const std::vector<Variant> tail_vs = {{3, 8, 1},   {3, 16, 1}, {3, 32, 1}, {3, 64, 1}, {3, 128, 1},
                                        {3, 256, 1}, {2, 64, 1}, {2, 128, 1}, {0, 64, 1}, {3, 4, 8},
                                        {3, 8, 8},   {3, 16, 8}, {3, 32, 4}};
  const char* tail_only = std::getenv("DAPO_SWEEP_TAIL");
  const bool tail = tail_only != nullptr && std::string(tail_only) == "1";
  // Contexts between the powers of two (a decode run crosses them step by
  // step); DAPO_SWEEP_MID=1 runs this part alone.
  const char* mid_only = std::getenv("DAPO_SWEEP_MID");
  if (mid_only != nullptr && std::string(mid_only) == "1") {
    std::vector<Variant> mid_vs = short_vs;
    mid_vs.insert(mid_vs.end(), {{3, 2, 2}, {3, 3, 1}, {3, 4, 1}, {3, 2, 4}});
    for (const PerfModel& m : kPerfModels)
      for (const int64_t B : {64, 128, 256})
        for (const int64_t len : {384, 520, 640, 768, 896}) sweep(m, B, len, mid_vs);
    return;
  }
  for (const PerfModel& m : kPerfModels) {
    if (!tail) {
      for (const int64_t B : {64, 128, 256})
        for (const int64_t len : {256, 512, 1024, 2048}) sweep(m, B, len, short_vs);
      for (const auto& [B, len] : {std::pair<int64_t, int64_t>{8, 4096}, {8, 16384}, {8, 32768}, {32, 8192},
                                   {32, 32768}, {128, 4096}, {128, 16384}})
        sweep(m, B, len, long_vs);
    }
    for (const int64_t B : {1, 2, 4})
      for (const int64_t len : {4096, 8192, 20480}) sweep(m, B, len, tail_vs);
  }
}

}  // namespace
}  // namespace dapo::test
