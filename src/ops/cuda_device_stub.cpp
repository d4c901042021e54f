// CudaDevice in builds without CUDA (-DDAPO_CUDA=OFF): no GPU is ever
// opened (cuda_device_count() is 0, so parallel.backend = auto picks the
// CPU), and asking for one is the user's error, not a link failure.
#ifndef DAPO_WITH_CUDA
#include "dapo/core/error.h"
#include "dapo/ops/cuda_device.h"

namespace dapo::ops {

int cuda_device_count() { return 0; }

CudaDevice::CudaDevice(int index, size_t) : index_(index) {
  throw UserError("this dapo was built without CUDA (-DDAPO_CUDA=OFF): set parallel.backend = cpu, or rebuild "
                  "with nvcc on PATH");
}
CudaDevice::~CudaDevice() = default;

// Unreachable: no CudaDevice can be constructed in this build.
Ctx CudaDevice::ctx(Arena*) const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
void CudaDevice::synchronize() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
void CudaDevice::comm_waits_for_compute() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
void CudaDevice::compute_waits_for_comm() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
void CudaDevice::check_flags(const char*) const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
DeviceFlags CudaDevice::read_flags() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
void CudaDevice::clear_flags() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
size_t CudaDevice::memory_used() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
size_t CudaDevice::memory_total() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
std::string CudaDevice::name() const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
void CudaDevice::copy_to_device(Tensor, Tensor) const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }
void CudaDevice::copy_to_host(Tensor, Tensor) const { DAPO_FAIL("CudaDevice: this build has no CUDA"); }

}  // namespace dapo::ops
#endif
