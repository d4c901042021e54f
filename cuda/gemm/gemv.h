// CUDA's small-batch products (cuda/gemm/gemv.cu): matmul.h's products at
// 1-8 input rows, planned by ops/plan/gemv_plan.h. Supported: bf16 input
// rows and weights, 16-byte aligned, K % 8 == 0, outputs bf16 or f32
// (SwiGLU: bf16), biases bf16 or f32. cuda::linear_forward,
// linear_forward_multi, qkv_rope_kv_write and linear_swiglu_forward route
// by supported && preferred, before the skinny kernel and cuBLASLt; tests
// and benchmarks call the kernels directly.
#pragma once

#include <span>

#include "dapo/ops/context.h"
#include "dapo/ops/matmul.h"

namespace dapo::ops::cuda::detail {

bool gemv_supported(const Tensor& in, std::span<const LinearSegment> segments);
bool gemv_preferred(int64_t M, int64_t K, std::span<const LinearSegment> segments);
void linear_forward_multi_gemv(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);
// The route of a product of few rows, shared by cuda::linear_forward and
// linear_forward_multi: the small-batch kernel, else the skinny kernel,
// where each is supported and preferred. Returns false, having launched
// nothing, when neither takes the call (then cuBLASLt's). Defined in
// linear_multi.cu beside the skinny kernel.
bool linear_forward_few_rows(const Ctx& ctx, Tensor in, std::span<const LinearSegment> segments);
bool linear_swiglu_gemv_supported(const Tensor& h, const Tensor& in, const Tensor& w_gate, const Tensor& w_up);
void linear_swiglu_gemv(const Ctx& ctx, Tensor h, Tensor in, Tensor w_gate, Tensor w_up);

}  // namespace dapo::ops::cuda::detail
