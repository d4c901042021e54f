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

}  // namespace
}  // namespace dapo::test
