// Training checkpoints of a Qwen2.5-shaped model whose state lives on GPUs
// (bf16 compute copy, fp32 master and AdamW moments on the device; ZeRO-1
// over dp when dp > 1): the sync save, the background save's stall (the
// pinned snapshot) and total, the resume, and each rank's plain write of
// the same bytes, on the disk of `--dir` (default /tmp). See
// bench/checkpoint_bench.h for the fields.
//
//   [mpirun -np N] bench_checkpoint_gpu [0.5b|1.5b|7b|...] [--tp T] [--dir D] [--no-shared-file]
#include <cstdio>
#include <filesystem>
#include <string>

#include "bench/checkpoint_bench.h"
#include "bench/qwen25_shapes.h"
#include "dapo/core/error.h"
#include "dapo/core/log.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/parallel/runtime.h"

using namespace dapo;

int main(int argc, char** argv) {
  parallel::Runtime runtime(&argc, &argv);
  std::string size = "1.5b", base = "/tmp";
  int tp = 1;
  bool shared_file = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--tp") tp = std::stoi(next());
    else if (a == "--dir") base = next();
    else if (a == "--no-shared-file") shared_file = false;
    else size = a;
  }
  if (ops::cuda_device_count() == 0) {
    std::printf("{\"bench\": \"checkpoint_gpu\", \"skipped\": \"no GPU\"}\n");
    return 0;
  }
  configure_logging({runtime.world_rank(), false, LogLevel::warn});
  const model::Qwen2Config c = bench::qwen25(size, "bench_checkpoint_gpu");
  const parallel::Grid grid = parallel::make_grid(tp);
  ops::CudaDevice gpu(grid.local_rank);
  if (grid.world_size() > 1) parallel::init_device_comms(grid);
  model::ParamStore params(c, grid.tp_rank, grid.tp_size, Device::cuda, gpu.ctx(nullptr).stream);
  params.init_random(bench::hf_like_init());
  optim::AdamW opt(params, optim::AdamWOptions{}, optim::ShardOptions{&grid.dp});
  const std::string dir = bench::shared_tmp_dir(grid.world, (std::filesystem::path(base) / "dapo_bench_ckpt").string());
  if (dir.empty()) {
    std::fprintf(stderr, "bench_checkpoint_gpu: cannot make a folder in %s\n", base.c_str());
    return 2;
  }
  try {
    const std::string fields = bench::checkpoint_bench(grid, params, opt, dir, shared_file);
    if (grid.world_rank() == 0)
      std::printf("{\"bench\": \"checkpoint_gpu\", \"model\": \"%s\", \"parameters\": %lld, \"gpu\": \"%s\", %s}\n",
                  size.c_str(), (long long)bench::parameters(c), gpu.name().c_str(), fields.c_str());
  } catch (const UserError& e) {
    std::fprintf(stderr, "bench_checkpoint_gpu: %s\n", e.what());
    return 2;
  }
  grid.world.barrier();
  if (grid.world_rank() == 0) std::filesystem::remove_all(dir);
  return 0;
}
