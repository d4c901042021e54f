// Paged attention on the GPU beyond the comparison with the CPU
// (test_backend_ops_attention.cpp has that, with kv_cache_write and
// kv_block_copy): the same bits on a rerun, with the planned split and with
// every forced one, at the harness's shapes (the merges of split-KV run in
// a fixed order: no atomics).
#include <cmath>

#include "cuda/cuda_ops.h"
#include "dapo/ops/kv_cache.h"
#include "gpu/gpu_test_util.h"
#include "gpu/op_shapes.h"

namespace dapo::test {
namespace {

using ops::cuda::detail::PagedSplit;

class KvCacheGpu : public GpuTest {
 protected:
  // Two runs of a case into guarded outputs (with `split`, that spread over
  // CTAs instead of the plan): the same bits.
  void expect_reruns_identical(const shapes::PagedCase& c, const PagedSplit* split) {
    SCOPED_TRACE(testing::Message() << "seed " << c.seed << (split ? " forced split: groups " : "")
                                    << (split ? split->groups : 0) << (split ? " cluster " : "")
                                    << (split ? split->cluster : 0) << (split ? " stages " : "")
                                    << (split ? split->stages : 0) << (split ? " qsplit " : "")
                                    << (split ? split->qsplit : 0));
    const size_t mark = arena_->mark();
    shapes::PagedLayout l = shapes::paged_layout(c);
    const int64_t Hq = c.Hq, Hkv = c.Hkv, D = c.D, BS = c.BS, N = l.N;
    const float scale = 1.0f / std::sqrt(float(D));
    Tensor dk = upload(random_bf16_exact(size_t(l.NB * BS * Hkv * D), c.seed + 1), {l.NB, BS, Hkv, D}, DType::bf16);
    Tensor dv = upload(random_bf16_exact(size_t(l.NB * BS * Hkv * D), c.seed + 2), {l.NB, BS, Hkv, D}, DType::bf16);
    Tensor dq = upload(random_bf16_exact(size_t(N * Hq * D), c.seed + 3, -3, 3), {N, Hq, D}, DType::bf16);
    Tensor dt = upload_raw(l.table, {l.B, l.max_blocks}), dl = upload_raw(l.lens, {l.B});
    Tensor dcu = upload_raw(l.cu, {l.B + 1});
    std::vector<std::vector<unsigned char>> runs;
    for (int run = 0; run < 2; ++run) {
      Tensor out = guarded(DType::bf16, {N, Hq, D});
      if (split != nullptr)
        ops::cuda::detail::paged_attention_with_split(gpu(), out, dq, dk, dv, dt, dl, dcu, l.max_len, scale, *split);
      else
        ops::paged_attention(gpu(), out, dq, dk, dv, dt, dl, dcu, l.max_len, scale);
      runs.push_back(bits(out));
    }
    EXPECT_TRUE(runs[0] == runs[1]) << "reruns differ";
    check_guards();
    guards_.clear();
    arena_->reset(mark);
  }
};

TEST_F(KvCacheGpu, PagedAttentionRerunsAreBitIdentical) {
  for (const shapes::PagedCase& c : shapes::paged_cases()) expect_reruns_identical(c, nullptr);
}

TEST_F(KvCacheGpu, ForcedSplitRerunsAreBitIdentical) {
  const std::vector<shapes::PagedCase> cases = shapes::paged_split_cases();
  for (const int64_t stages : {0, 2, 3})
    for (const int64_t cluster : {1, 2, 4, 8})
      for (const int64_t groups : {1, 3}) {
        PagedSplit sp;
        sp.groups = groups;
        sp.cluster = cluster;
        sp.stages = stages;
        PagedSplit pre = sp;
        pre.qsplit = 3;
        for (size_t i = 0; i < cases.size(); ++i) expect_reruns_identical(cases[i], i + 2 < cases.size() ? &sp : &pre);
        if (HasFailure()) return;
      }
  PagedSplit plain;
  plain.cluster = 2;
  plain.pdl = false;
  expect_reruns_identical(shapes::paged_no_pdl_case(), &plain);
}

// Bad metadata on the GPU raises the device flag instead of passing
// silently: a cache write to a slot outside the pool (-1, "skip", is no
// error), a block id outside the pool inside a sequence's length, and a
// sequence whose length is past max_context_len.
TEST_F(KvCacheGpu, BadSlotsAndSequenceMetadataRaiseTheDeviceFlag) {
  const int64_t NB = 4, BS = 16, Hkv = 2, Hq = 4, D = 64;
  Tensor kc = upload(random_bf16_exact(size_t(NB * BS * Hkv * D), 1), {NB, BS, Hkv, D}, DType::bf16);
  Tensor vc = upload(random_bf16_exact(size_t(NB * BS * Hkv * D), 2), {NB, BS, Hkv, D}, DType::bf16);
  Tensor k = upload(random_bf16_exact(size_t(3 * Hkv * D), 3), {3, Hkv, D}, DType::bf16);
  Tensor v = upload(random_bf16_exact(size_t(3 * Hkv * D), 4), {3, Hkv, D}, DType::bf16);
  device_->clear_flags();
  ops::kv_cache_write(gpu(), kc, vc, k, v, upload_raw(std::vector<int32_t>{0, -1, 5}, {3}));
  device_->synchronize();
  EXPECT_EQ(device_->read_flags().bad_id_count, 0);
  ops::kv_cache_write(gpu(), kc, vc, k, v, upload_raw(std::vector<int32_t>{0, -1, int32_t(NB * BS)}, {3}));
  device_->synchronize();
  ops::DeviceFlags f = device_->read_flags();
  EXPECT_EQ(f.bad_id_count, 1);
  EXPECT_EQ(ops::FlagSite(f.bad_id_site), ops::FlagSite::kv_slot);
  EXPECT_EQ(f.bad_id_row, 2);
  EXPECT_EQ(f.bad_id_value, NB * BS);

  // Decode of 2 sequences of 20 and 33 keys (2 and 3 blocks).
  Tensor q = upload(random_bf16_exact(size_t(2 * Hq * D), 5), {2, Hq, D}, DType::bf16);
  Tensor out = device_empty(DType::bf16, {2, Hq, D});
  Tensor cu = upload_raw(std::vector<int32_t>{0, 1, 2}, {3});
  auto run = [&](const std::vector<int32_t>& table, const std::vector<int32_t>& lens, int64_t max_len) {
    device_->clear_flags();
    ops::paged_attention(gpu(), out, q, kc, vc, upload_raw(table, {2, 3}), upload_raw(lens, {2}), cu, max_len,
                         0.125f);
    device_->synchronize();
    return device_->read_flags();
  };
  f = run({0, 1, -1, 2, 3, 1}, {20, 33}, 33);
  EXPECT_EQ(f.bad_id_count, 0);  // an unused table entry (-1 past the length) is no error
  f = run({0, 1, -1, 2, int32_t(NB) + 3, 1}, {20, 33}, 33);
  EXPECT_GE(f.bad_id_count, 1);
  EXPECT_EQ(ops::FlagSite(f.bad_id_site), ops::FlagSite::paged_metadata);
  EXPECT_EQ(f.bad_id_row, 1);
  EXPECT_EQ(f.bad_id_value, NB + 3);
  f = run({0, 1, -1, 2, 3, 1}, {20, 40}, 33);  // a length past max_context_len
  EXPECT_GE(f.bad_id_count, 1);
  EXPECT_EQ(ops::FlagSite(f.bad_id_site), ops::FlagSite::paged_metadata);
  EXPECT_EQ(f.bad_id_row, 1);
  EXPECT_EQ(f.bad_id_value, 40);
  device_->clear_flags();
}

}  // namespace
}  // namespace dapo::test
