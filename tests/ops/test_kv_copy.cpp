// KV-cache block copy: destination blocks become exact copies of their
// sources in both pools, every other block keeps its bits, an empty copy
// list is a no-op, and bad block lists are fatal with a clear message.
#include "dapo/ops/kv_copy.h"

#include <cstring>

#include "ops/op_test_util.h"

namespace dapo {
namespace {

constexpr int64_t NB = 7, BS = 3, Hkv = 2, D = 5, kBlock = BS * Hkv * D;

struct Pools {
  std::vector<float> k = test::random_vector(size_t(NB * kBlock), 41);
  std::vector<float> v = test::random_vector(size_t(NB * kBlock), 42);
  Tensor kt() { return tensor_f32(k.data(), {NB, BS, Hkv, D}); }
  Tensor vt() { return tensor_f32(v.data(), {NB, BS, Hkv, D}); }
};

bool same_block(const std::vector<float>& a, int64_t ba, const std::vector<float>& b, int64_t bb) {
  return std::memcmp(a.data() + ba * kBlock, b.data() + bb * kBlock, kBlock * sizeof(float)) == 0;
}

TEST(KvBlockCopy, CopiesBlocksAndLeavesTheRest) {
  Pools p;
  const Pools before = p;
  std::vector<int32_t> src{4, 0, 4}, dst{1, 6, 2};  // one source copied twice
  ops::kv_block_copy(test::cpu_ctx(), p.kt(), p.vt(), tensor_i32(src.data(), {3}), tensor_i32(dst.data(), {3}));
  for (size_t j = 0; j < src.size(); ++j) {
    EXPECT_TRUE(same_block(p.k, dst[j], before.k, src[j])) << "k copy " << j;
    EXPECT_TRUE(same_block(p.v, dst[j], before.v, src[j])) << "v copy " << j;
  }
  for (int64_t b : {0, 3, 4, 5}) {
    EXPECT_TRUE(same_block(p.k, b, before.k, b)) << "k block " << b;
    EXPECT_TRUE(same_block(p.v, b, before.v, b)) << "v block " << b;
  }
}

TEST(KvBlockCopy, EmptyListIsANoOp) {
  Pools p;
  const Pools before = p;
  int32_t none = 0;
  ops::kv_block_copy(test::cpu_ctx(), p.kt(), p.vt(), tensor_i32(&none, {0}), tensor_i32(&none, {0}));
  EXPECT_EQ(p.k, before.k);
  EXPECT_EQ(p.v, before.v);
}

TEST(KvBlockCopyDeathTest, BadBlockListsAreFatal) {
  Pools p;
  auto copy = [&](std::vector<int32_t> src, std::vector<int32_t> dst) {
    set_abort_hook(nullptr);
    ops::kv_block_copy(test::cpu_ctx(), p.kt(), p.vt(), tensor_i32(src.data(), {int64_t(src.size())}),
                       tensor_i32(dst.data(), {int64_t(dst.size())}));
  };
  EXPECT_DEATH(copy({1}, {7}), "copy 0 is block 1 -> 7, outside \\[0, 7\\)");
  EXPECT_DEATH(copy({-1}, {2}), "copy 0 is block -1 -> 2");
  EXPECT_DEATH(copy({1, 2}, {3, 3}), "block 3 is the destination of two copies");
  EXPECT_DEATH(copy({1, 2}, {2, 4}), "block 2 is both a source and a destination");
  std::vector<int32_t> src{1, 2}, dst{3};
  EXPECT_DEATH((set_abort_hook(nullptr), ops::kv_block_copy(test::cpu_ctx(), p.kt(), p.vt(),
                                                            tensor_i32(src.data(), {2}), tensor_i32(dst.data(), {1}))),
               "dst_blocks has shape \\(1\\), expected \\(2\\)");
  std::vector<float> small(size_t(NB * kBlock));
  EXPECT_DEATH((set_abort_hook(nullptr),
                ops::kv_block_copy(test::cpu_ctx(), p.kt(), tensor_f32(small.data(), {NB, BS, Hkv * D, 1}),
                                   tensor_i32(src.data(), {1}), tensor_i32(dst.data(), {1}))),
               "v_cache has shape");
  // One pool as both caches: the two pools are copied in parallel.
  EXPECT_DEATH((set_abort_hook(nullptr), ops::kv_block_copy(test::cpu_ctx(), p.kt(), p.kt(),
                                                            tensor_i32(src.data(), {1}), tensor_i32(dst.data(), {1}))),
               "kv_block_copy: k_cache overlaps v_cache");
}

}  // namespace
}  // namespace dapo
