// Step I/O on the GPU (ops/step_io.h) beyond the comparison with the CPU op
// (test_backend_ops_elementwise.cpp): the metadata's way in (with fed
// tokens) and the samples' way out inside a captured graph re-targeted
// between replays (set_step_in / set_step_out), as the engine's decode
// steps run them; and the arguments the ops refuse.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "dapo/ops/copy.h"
#include "dapo/ops/cuda_graph.h"
#include "dapo/ops/fill.h"
#include "dapo/ops/step_io.h"
#include "gpu_test_util.h"

namespace dapo {
namespace {

using test::GpuTest;

class StepIoGpu : public GpuTest {};

// What step_in must leave: host words, with tokens[0, fed_count) from fed.
std::vector<int32_t> expected_in(const std::vector<int32_t>& host, int64_t tokens0, const std::vector<int32_t>& fed,
                                 int64_t fed_count) {
  std::vector<int32_t> want = host;
  for (int64_t r = 0; r < fed_count; ++r) want[size_t(tokens0 + r)] = fed[size_t(r)];
  return want;
}

// One graph, replayed with its step_in and step_out pointed at alternating
// host blocks with different word and fed counts (the engine's launch-ahead
// packs step k + 1 while step k's block is still queued): every replay
// moves what its own arguments say, nothing of the capture's.
TEST_F(StepIoGpu, AGraphIsRetargetedBetweenReplays) {
  const int64_t capacity = 3000;
  Arena pinned(size_t(1) << 20, Arena::Pinned{}, "step-io-test");
  int32_t* blocks[2] = {pinned.alloc_array<int32_t>(capacity), pinned.alloc_array<int32_t>(capacity)};
  int32_t* outs[2] = {pinned.alloc_array<int32_t>(capacity), pinned.alloc_array<int32_t>(capacity)};
  const Tensor dev = device_empty(DType::i32, {capacity});
  const Tensor fed = device_empty(DType::i32, {128});
  std::vector<int32_t> fed_host(128);
  std::iota(fed_host.begin(), fed_host.end(), 7000);
  device_->copy_to_device(fed, Tensor(fed_host.data(), DType::i32, {128}));
  const ops::Ctx ctx = gpu();
  auto in_args = [&](int slot, int64_t n, int64_t fed_count) {
    const int64_t N = std::min<int64_t>(128, n - 8);
    return ops::StepIn{Tensor(blocks[slot], DType::i32, {n}), Tensor(dev.data, DType::i32, {n}, Device::cuda),
                       Tensor(static_cast<int32_t*>(dev.data) + 8, DType::i32, {N}, Device::cuda), fed,
                       std::min(fed_count, N), capacity};
  };
  auto out_args = [&](int slot, int64_t n) {
    return ops::StepOut{Tensor(outs[slot], DType::i32, {n}), Tensor(dev.data, DType::i32, {n}, Device::cuda),
                        capacity};
  };
  ops::CapturedGraph graph = ops::CapturedGraph::capture(ctx, [&] {
    ops::step_in(ctx, in_args(0, 2000, 0));
    ops::step_out(ctx, out_args(0, 2000));
  });
  struct Replay {
    int slot;
    int64_t n, fed_count;
  };
  const std::vector<Replay> replays = {{0, 2000, 0}, {1, 2999, 128}, {0, 17, 9}, {1, 3000, 1}, {0, 1500, 128}};
  for (size_t i = 0; i < replays.size(); ++i) {
    const Replay& r = replays[i];
    std::vector<int32_t> host(size_t(r.n));
    std::iota(host.begin(), host.end(), int32_t(100000 * (i + 1)));
    std::memcpy(blocks[r.slot], host.data(), host.size() * 4);
    std::memset(outs[r.slot], 0, size_t(capacity) * 4);
    ops::set_step_in(graph, in_args(r.slot, r.n, r.fed_count));
    ops::set_step_out(graph, out_args(r.slot, r.n));
    graph.launch(ctx);
    ops::stream_synchronize(ctx);
    const std::vector<int32_t> want = expected_in(host, 8, fed_host, std::min<int64_t>(r.fed_count, r.n - 8));
    EXPECT_EQ(std::vector<int32_t>(outs[r.slot], outs[r.slot] + r.n), want) << "replay " << i;
    // Nothing beyond n is written to the host.
    EXPECT_EQ(std::count(outs[r.slot] + r.n, outs[r.slot] + capacity, 0), capacity - r.n) << "replay " << i;
  }
}

TEST_F(StepIoGpu, BadArgumentsAreRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Arena pinned(size_t(1) << 16, Arena::Pinned{}, "step-io-test");
  int32_t* h = pinned.alloc_array<int32_t>(64);
  std::vector<int32_t> pageable(64);
  const Tensor dev = device_empty(DType::i32, {64}), fed = device_empty(DType::i32, {16});
  const Tensor tokens(dev.data, DType::i32, {16}, Device::cuda);
  EXPECT_DEATH(ops::step_in(gpu(), {Tensor(pageable.data(), DType::i32, {64}), dev, tokens, fed, 4, 64}), "not pinned");
  EXPECT_DEATH(ops::step_in(gpu(), {Tensor(h, DType::i32, {64}), dev, tokens, fed, 4, 63}), "capacity");
  EXPECT_DEATH(ops::step_in(gpu(), {Tensor(h, DType::i32, {64}), dev, tokens, fed, 17, 64}), "fed_count");
  EXPECT_DEATH(ops::step_in(gpu(), {Tensor(h, DType::i32, {64}), dev, fed, fed, 4, 64}), "inside the device mirror");
  EXPECT_DEATH(ops::step_out(gpu(), {Tensor(pageable.data(), DType::i32, {64}), dev, 64}), "not pinned");
  EXPECT_DEATH(ops::step_out(gpu(), {Tensor(h, DType::i32, {32}), dev, 64}), "host words");
  // A graph re-targeted past the capacity it was captured with.
  const ops::Ctx ctx = gpu();
  ops::CapturedGraph graph =
      ops::CapturedGraph::capture(ctx, [&] {
        ops::step_out(ctx, {Tensor(h, DType::i32, {8}), Tensor(dev.data, DType::i32, {8}, Device::cuda), 8});
      });
  EXPECT_DEATH(ops::set_step_out(graph, {Tensor(h, DType::i32, {64}), dev, 2048}), "captured grid");
  EXPECT_DEATH(ops::set_step_in(graph, {Tensor(h, DType::i32, {64}), dev, tokens, fed, 0, 64}), "no node");
}

}  // namespace
}  // namespace dapo
