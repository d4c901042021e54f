// The per-rank GPU: device selection, streams, cuBLASLt handle, workspace.
#include "common.cuh"
#include "dapo/ops/cuda_device.h"
#include "cuda/cuda_ops.h"
#include "runtime/libraries.h"

namespace dapo::ops {

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

CudaDevice::CudaDevice(int index, size_t workspace_bytes) : index_(index) {
  const int count = cuda_device_count();
  DAPO_CHECK(index >= 0 && index < count, "GPU ", index, " requested, ", count, " visible");
  DAPO_CUDA_CHECK(cudaSetDevice(index));
  cudaStream_t stream;
  DAPO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_ = stream;
  libraries_ = new cuda::Libraries();
  DAPO_CUBLAS_CHECK(cublasLtCreate(&libraries_->cublaslt));
  DAPO_CUDA_CHECK(cudaMalloc(&libraries_->workspace, workspace_bytes));
  libraries_->workspace_bytes = workspace_bytes;
  cudaStream_t comm;
  DAPO_CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
  comm_stream_ = comm;
  cudaEvent_t e1, e2;  // ordering only: no timing
  DAPO_CUDA_CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  DAPO_CUDA_CHECK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
  compute_done_ = e1;
  comm_done_ = e2;
  DAPO_CUDA_CHECK(cudaMalloc(&flags_, sizeof(DeviceFlags)));
  DAPO_CUDA_CHECK(cudaMemsetAsync(flags_, 0, sizeof(DeviceFlags), stream));
  libraries_->gemm_plans = cuda::gemm_plan_cache_create();
  synchronize();
}

CudaDevice::~CudaDevice() {
  // Errors here are ignored on purpose: a destructor during error unwinding
  // must not abort a job that is already reporting its real failure.
  if (libraries_) {
    if (libraries_->gemm_plans) cuda::gemm_plan_cache_destroy(libraries_->gemm_plans);
    if (libraries_->workspace) cudaFree(libraries_->workspace);
    if (libraries_->cublaslt) cublasLtDestroy(libraries_->cublaslt);
    delete libraries_;
  }
  if (flags_) cudaFree(flags_);
  if (compute_done_) cudaEventDestroy(static_cast<cudaEvent_t>(compute_done_));
  if (comm_done_) cudaEventDestroy(static_cast<cudaEvent_t>(comm_done_));
  if (comm_stream_) cudaStreamDestroy(static_cast<cudaStream_t>(comm_stream_));
  if (stream_) cudaStreamDestroy(stream_);
}

Ctx CudaDevice::ctx(Arena* scratch) const {
  DAPO_CHECK(scratch == nullptr || scratch->device() == Device::cuda, "a CUDA Ctx needs a device arena");
  Ctx c;
  c.backend = Backend::cuda;
  c.stream = stream_;
  c.scratch = scratch;
  c.flags = flags_;
  c.libraries = libraries_;
  return c;
}

void CudaDevice::synchronize() const {
  DAPO_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaDevice::comm_waits_for_compute() const {
  DAPO_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(compute_done_), stream_));
  DAPO_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(comm_stream_), static_cast<cudaEvent_t>(compute_done_)));
}

void CudaDevice::compute_waits_for_comm() const {
  DAPO_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(comm_done_), static_cast<cudaStream_t>(comm_stream_)));
  DAPO_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(comm_done_)));
}

DeviceFlags CudaDevice::read_flags() const {
  DeviceFlags f;
  DAPO_CUDA_CHECK(cudaMemcpyAsync(&f, flags_, sizeof(f), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return f;
}

void CudaDevice::clear_flags() const {
  DAPO_CUDA_CHECK(cudaMemsetAsync(flags_, 0, sizeof(DeviceFlags), stream_));
}

void CudaDevice::check_flags(const char* phase) const {
  const DeviceFlags f = read_flags();
  if (f.bad_id_count != 0)
    DAPO_FAIL(phase, ": ", f.bad_id_count, " id(s) out of range on GPU ", index_, " (token ids, cache slots, block ids), first in ",
              flag_site_name(FlagSite(f.bad_id_site)), " at row ", f.bad_id_row, ": id ", f.bad_id_value);
  if (f.non_finite_count != 0)
    DAPO_FAIL(phase, ": ", f.non_finite_count, " non-finite value(s) on GPU ", index_, ", first in ",
              flag_site_name(FlagSite(f.non_finite_site)), " at row ", f.non_finite_row,
              " (diverged? lower optim.lr, or check the inputs)");
}

size_t CudaDevice::memory_used() const {
  size_t free = 0, total = 0;
  DAPO_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

size_t CudaDevice::memory_total() const {
  size_t free = 0, total = 0;
  DAPO_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total;
}

std::string CudaDevice::name() const {
  cudaDeviceProp prop;
  DAPO_CUDA_CHECK(cudaGetDeviceProperties(&prop, index_));
  return prop.name;
}

void CudaDevice::copy_to_device(Tensor dst, Tensor src) const {
  DAPO_CHECK(dst.device == Device::cuda && src.device == Device::cpu && dst.nbytes() == src.nbytes() &&
                 dst.dtype == src.dtype,
             "copy_to_device ", src.shape_string(), " -> ", dst.shape_string());
  DAPO_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyHostToDevice,
                                  stream_));
  synchronize();
}

void CudaDevice::copy_to_host(Tensor dst, Tensor src) const {
  DAPO_CHECK(dst.device == Device::cpu && src.device == Device::cuda && dst.nbytes() == src.nbytes() &&
                 dst.dtype == src.dtype,
             "copy_to_host ", src.shape_string(), " -> ", dst.shape_string());
  DAPO_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToHost,
                                  stream_));
  synchronize();
}

}  // namespace dapo::ops
