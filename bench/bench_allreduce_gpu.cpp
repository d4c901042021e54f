// NCCL all-reduce bandwidth over the ranks of one launch, through dapo's
// Comm (the path the model's tp all-reduces and the dp gradient buckets
// take), one GPU per rank: the reference that the update's tp all-reduce is
// measured against (issue: "the tp all-reduce at tp 8, against NCCL's own
// ring bandwidth").
// For each message size, the mean time of back-to-back in-place sums on the
// compute stream after warm-up, reported as algorithm bandwidth (bytes /
// time) and bus bandwidth (algorithm bandwidth x 2 (n - 1) / n, what a ring
// moves per link, as nccl-tests report it). One JSON line per size, rank 0.
// The sizes include the update's tp all-reduce of the Qwen2.5 shapes: the
// (tokens, hidden) bf16 activation gradient at max_token_len_per_gpu tokens.
//   mpirun -np 8 bench_allreduce_gpu [--dtype bf16|f32] [--iters 20]
#include <cstdio>
#include <string>
#include <vector>

#include "dapo/core/arena.h"
#include "dapo/core/clock.h"
#include "dapo/core/log.h"
#include "dapo/ops/copy.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/ops/fill.h"
#include "dapo/parallel/comm.h"
#include "dapo/parallel/runtime.h"

using namespace dapo;

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  DType dtype = DType::bf16;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dtype" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "bf16" && d != "f32") {
        std::fprintf(stderr, "bench_allreduce_gpu: --dtype bf16 or f32, not '%s'\n", d.c_str());
        return 2;
      }
      dtype = d == "f32" ? DType::f32 : DType::bf16;
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::stoi(argv[++i]));
    }
  }
  const parallel::Comm world = parallel::Comm::world();
  const int64_t short_of_gpus =
      world.all_reduce_i64(ops::cuda_device_count() > runtime.local_rank() ? 0 : 1, parallel::ReduceOp::max);
  if (short_of_gpus) {
    if (world.rank() == 0) std::printf("{\"bench\": \"allreduce_gpu\", \"skipped\": \"needs one GPU per rank\"}\n");
    return 0;
  }
  configure_logging({world.rank(), false, LogLevel::warn});
  const ops::CudaDevice gpu(runtime.local_rank());
  world.init_nccl();
  const size_t elem = dtype_size(dtype);
  // Powers of four from 1 MiB to 1 GiB, then the update's tp all-reduce:
  // (22528 tokens, hidden) bf16 for 7B (3584) and 32B (5120).
  std::vector<size_t> sizes;
  for (size_t b = size_t(1) << 20; b <= size_t(1) << 30; b *= 4) sizes.push_back(b);
  sizes.push_back(size_t(22528) * 3584 * 2);
  sizes.push_back(size_t(22528) * 5120 * 2);
  size_t largest = 0;
  for (const size_t b : sizes) largest = std::max(largest, b);
  Arena arena(largest + 4096, Device::cuda, "allreduce");
  const ops::Ctx ctx = gpu.ctx(nullptr);
  const int n = world.size();
  for (const size_t bytes : sizes) {
    ArenaScope scope(arena);
    const Tensor buf = arena.alloc(dtype, {int64_t(bytes / elem)});
    // Sums of zeros stay zeros: no overflow over many iterations.
    ops::fill(ctx, buf, 0.0);
    for (int i = 0; i < 3; ++i) world.all_reduce(buf, parallel::ReduceOp::sum, ctx.stream);
    ops::stream_synchronize(ctx);
    world.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) world.all_reduce(buf, parallel::ReduceOp::sum, ctx.stream);
    ops::stream_synchronize(ctx);
    // The slowest rank's time is the collective's.
    const double s = world.all_reduce_f64(seconds_since(t0), parallel::ReduceOp::max) / iters;
    const double algbw = double(bytes) / s;
    if (world.rank() == 0)
      std::printf("{\"bench\": \"allreduce_gpu\", \"gpu\": \"%s\", \"ranks\": %d, \"dtype\": \"%s\", \"bytes\": %zu, "
                  "\"us\": %.1f, \"algbw_gbs\": %.1f, \"busbw_gbs\": %.1f}\n",
                  gpu.name().c_str(), n, dtype_name(dtype), bytes, s * 1e6, algbw / 1e9,
                  algbw * 2.0 * double(n - 1) / double(n) / 1e9);
    std::fflush(stdout);
  }
  return 0;
}
