// The per-rank GPU: device selection, stream, cuBLASLt handle, workspace.
#include "common.cuh"
#include "dapo/ops/cuda_device.h"

namespace dapo::ops {

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

CudaDevice::CudaDevice(int index, size_t workspace_bytes) : index_(index), workspace_bytes_(workspace_bytes) {
  const int count = cuda_device_count();
  DAPO_CHECK(index >= 0 && index < count, "GPU ", index, " requested, ", count, " visible");
  DAPO_CUDA_CHECK(cudaSetDevice(index));
  cudaStream_t stream;
  DAPO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_ = stream;
  cublasLtHandle_t lt;
  DAPO_CUBLAS_CHECK(cublasLtCreate(&lt));
  cublaslt_ = lt;
  DAPO_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CudaDevice::~CudaDevice() {
  // Errors here are ignored on purpose: a destructor during error unwinding
  // must not abort a job that is already reporting its real failure.
  if (workspace_) cudaFree(workspace_);
  if (cublaslt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(cublaslt_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Ctx CudaDevice::ctx(Arena* scratch) const {
  DAPO_CHECK(scratch == nullptr || scratch->device() == Device::cuda, "a CUDA Ctx needs a device arena");
  Ctx c;
  c.backend = Backend::cuda;
  c.stream = stream_;
  c.cublaslt = cublaslt_;
  c.workspace = workspace_;
  c.workspace_bytes = workspace_bytes_;
  c.scratch = scratch;
  return c;
}

void CudaDevice::synchronize() const {
  DAPO_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
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
                                  static_cast<cudaStream_t>(stream_)));
  synchronize();
}

void CudaDevice::copy_to_host(Tensor dst, Tensor src) const {
  DAPO_CHECK(dst.device == Device::cpu && src.device == Device::cuda && dst.nbytes() == src.nbytes() &&
                 dst.dtype == src.dtype,
             "copy_to_host ", src.shape_string(), " -> ", dst.shape_string());
  DAPO_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToHost,
                                  static_cast<cudaStream_t>(stream_)));
  synchronize();
}

}  // namespace dapo::ops
