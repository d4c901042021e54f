// Carver (core/carver.h): a counting pass takes exactly the bytes that
// carving the same allocations from an arena takes, so arena_bytes() is
// enough for an arena whatever its mark; and overlaps() (core/tensor.h),
// the one overlap test of ops and collectives.
#include "dapo/core/carver.h"

#include <gtest/gtest.h>

#include <vector>

namespace dapo {
namespace {

// A plan with odd sizes (no allocation a multiple of the alignment) and a
// reset, as the model's plans release temporaries.
void carve_plan(Carver& c) {
  c.f32({3, 5});
  c.alloc_array<int64_t>(7);
  const size_t mark = c.mark();
  c.alloc(DType::bf16, {11, 13});
  c.reset(mark);
  c.alloc_array<int32_t>(1);
  c.alloc_array<float>(0);
}

TEST(Carver, CountingMatchesCarving) {
  Carver count(nullptr);
  carve_plan(count);
  const Tensor t = count.f32({2});
  EXPECT_EQ(t.data, nullptr);
  EXPECT_EQ(count.alloc_array<float>(4), nullptr);

  for (size_t offset : {size_t(0), size_t(1), size_t(255), size_t(300)}) {
    Carver plan(nullptr);
    carve_plan(plan);
    Arena arena(offset + plan.arena_bytes(), Device::cpu, "test");
    arena.alloc_bytes(offset);  // a mark that need not be aligned
    Carver carve(&arena);
    carve_plan(carve);
    EXPECT_LE(carve.peak(), plan.arena_bytes()) << "offset " << offset;
    if (offset % Arena::kAlign == 0) EXPECT_EQ(carve.peak(), plan.peak()) << "offset " << offset;
  }
}

TEST(Carver, CarvedTensorsAreDisjointAndOnTheArenasDevice) {
  Arena arena(1 << 12, Device::cpu, "test");
  Carver c(&arena);
  const Tensor a = c.f32({3, 5});
  const Tensor b = c.alloc(DType::i32, {4});
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.device, Device::cpu);
  EXPECT_FALSE(overlaps(a, b));
}

TEST(Overlaps, ByteRanges) {
  std::vector<float> v(8);
  const Tensor all = tensor_f32(v.data(), {8});
  EXPECT_TRUE(overlaps(all, all));
  EXPECT_TRUE(overlaps(all, tensor_f32(v.data() + 7, {1})));
  EXPECT_FALSE(overlaps(tensor_f32(v.data(), {4}), tensor_f32(v.data() + 4, {4})));  // adjacent
  EXPECT_FALSE(overlaps(all, tensor_f32(v.data() + 2, {0})));                       // empty
  EXPECT_FALSE(overlaps(all, Tensor{}));                                              // left out
}

}  // namespace
}  // namespace dapo
