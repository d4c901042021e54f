// The GPU one rank drives when parallel.backend = cuda: chosen by the rank's
// local rank on its node (one rank per GPU, as srun and mpirun launch it),
// bound before any CUDA work, with the NCCL communicators of the grid made
// at start-up. On the CPU backend there is none and everything runs on the
// host as before.
#pragma once

#include <memory>

#include "dapo/core/config.h"
#include "dapo/ops/cuda_device.h"
#include "dapo/parallel/grid.h"

namespace dapo::trainer {

// nullptr for the CPU backend: parallel.backend = cpu, or auto where some
// rank has no GPU of its own (auto is cuda where every rank has one). For
// cuda: UserError when this build or a node has no GPU, or fewer GPUs than
// ranks on the node.
// Collective over grid.world (the NCCL communicators).
std::unique_ptr<ops::CudaDevice> open_rank_device(const Config& config, const parallel::Grid& grid, int local_rank);

// Where a ParamStore of this rank lives: the GPU's memory and stream, or the host.
inline Device device_of(const ops::CudaDevice* gpu) { return gpu ? Device::cuda : Device::cpu; }

}  // namespace dapo::trainer
