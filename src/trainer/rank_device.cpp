// Binding a rank to its GPU (rank_device.h).
#include "dapo/trainer/rank_device.h"

#include "dapo/core/error.h"
#include "dapo/core/log.h"

namespace dapo::trainer {

std::unique_ptr<ops::CudaDevice> open_rank_device(const Config& config, const parallel::Grid& grid, int local_rank) {
  if (config.parallel.backend == BackendChoice::cpu) return nullptr;
  const int count = cuda_available() ? ops::cuda_device_count() : 0;
  // Every rank decides alike, so that none is left waiting in a collective.
  const int64_t worst = grid.world.all_reduce_i64(count > local_rank ? 1 : 0, parallel::ReduceOp::min);
  if (worst == 0 && config.parallel.backend == BackendChoice::auto_) return nullptr;  // auto: the CPU
  if (worst == 0)
    throw UserError(cat(config.origin_of("parallel.backend"), ": parallel.backend = cuda, but ",
                        count == 0 ? std::string("this build or a node has no usable GPU")
                                   : cat("a node runs more ranks than its ", count, " GPUs (one rank per GPU)")));
  auto gpu = std::make_unique<ops::CudaDevice>(local_rank);
  parallel::init_device_comms(grid);
  DAPO_INFO("cuda: rank ", grid.world_rank(), " on GPU ", local_rank, " (", gpu->name(), "), NCCL ready for tp ",
            grid.tp_size, " x dp ", grid.dp_size);
  return gpu;
}

}  // namespace dapo::trainer
